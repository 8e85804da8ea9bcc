"""WER and speed of whisper.cpp settings (beams, flash attention, -mc) on the eval clips.

    .venv/bin/python benchmarks/whispercpp_settings.py [CLIPS_DIR] [--model NAME]

Runs kvscribe's whispercpp backend (one whisper-cli child per clip, as users
run it) for each setting in turn, after one untimed warm-up clip. Prints a
markdown table: pooled WER (Whisper's English normaliser), seconds, x real time,
and the kv self / kv cross bytes held (whisper.cpp's own figures; at beam > 1 the
self figure is derived: its printed one-decoder size x (beams + 2)). The profiles'
[whispercpp] sections were chosen from this table. Writes
benchmarks/results/whispercpp_settings.json (per setting and per clip: WER, seconds,
KV bytes and whisper.cpp's own memory figures incl. compute buffers) and
whispercpp_settings.md (the printed table).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import corpus
import jiwer
import results_file
from whisper_normalizer.english import EnglishTextNormalizer

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest
from kvscribe.provenance import MEASURED

SETTINGS = [  # (beam_size, flash_attn, max_context)
    (5, False, -1),
    (5, True, -1),
    (1, False, -1),
    (1, True, -1),
    (1, True, 128),
    (5, True, 64),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    default = corpus.CLIPS
    parser.add_argument("clips", nargs="?", type=Path, default=default)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    paths = sorted(args.clips.glob("*.wav"))
    clips = [(p.name, load_audio(p), p.with_suffix(".txt").read_text()) for p in paths]
    audio_seconds = sum(a.size for _, a, _ in clips) / 16000
    lines = [
        f"{len(clips)} clips, {audio_seconds:.1f} s of audio",
        "",
        "| beam | flash attn | -mc | pooled WER | seconds | x real time "
        "| kv self held (MB) | kv cross held (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    model = models.resolve(args.model, ("ggml",))
    rows = []
    for beam, flash, context in SETTINGS:
        row = _run(model, clips, audio_seconds, beam, flash, context)
        rows.append(row)
        lines.append(_format(row))
        print(lines[-1], flush=True)
    lines += ["", "(derived): whisper.cpp's printed one-decoder self cache x (beams + 2)."]
    print("\n".join(lines[-2:]))
    meta = {
        "device": "cpu",
        "backend": "whispercpp",
        "profile": "cpu-laptop, [whispercpp] settings replaced per row",
        "model": model.name,
        "whisper_cli": rows[0]["settings"].get("whisper-cli") if rows else None,
        "clips_dir": str(args.clips),
        "clips": len(clips),
        "audio_seconds": audio_seconds,
        "timing": "seconds: all clips, one whisper-cli child each, after an untimed warm-up",
        "kv_bytes": "held; self: whisper.cpp's printed figure, x (beams + 2) at beam > 1 "
        "(derived); cross: printed (measured)",
    }
    results_file.write("whispercpp_settings", meta, rows, "\n".join(lines))


def _run(model, clips, audio_seconds: float, beam: int, flash: bool, context: int) -> dict:
    base = profile.load("cpu-laptop")
    settings = {"beam_size": beam, "flash_attn": flash, "max_context": context}
    custom = dataclasses.replace(base, backends={**base.backends, "whispercpp": settings})
    backend = registry.get("whispercpp")(model, custom, "cpu")
    backend.load()
    list(backend.transcribe(clips[0][1], DecodeRequest()).segments)  # warm-up, not timed
    normalize = EnglishTextNormalizer()
    references, hypotheses, per_clip = [], [], []
    started = time.perf_counter()
    for name, samples, reference in clips:
        clip_started = time.perf_counter()
        run = backend.transcribe(samples, DecodeRequest())
        text = "".join(s.text for s in run.segments)
        clip_seconds = time.perf_counter() - clip_started
        hypotheses.append(normalize(text))
        references.append(normalize(reference))
        report = run.report
        per_clip.append(
            {
                "clip": name,
                "audio_seconds": samples.size / 16000,
                "wer": jiwer.wer(references[-1], hypotheses[-1]),
                "seconds": clip_seconds,
                "kv_self_held_bytes": report.kv_self_peak_bytes,
                "kv_cross_held_bytes": report.kv_cross_bytes,
                "kv_provenance": dict(report.kv_provenance),
                "engine_memory_bytes": dict(report.engine_memory_bytes),
                "engine_peak_rss_bytes": report.engine_peak_rss_bytes,
                "text": text,
            }
        )
    elapsed = time.perf_counter() - started
    report = run.report  # the last clip's, as the table has always shown
    return {
        "beam": beam,
        "flash_attn": flash,
        "max_context": context,
        "settings": dict(report.settings),
        "pooled_wer": jiwer.wer(references, hypotheses),
        "seconds": elapsed,
        "x_real_time": audio_seconds / elapsed,
        "kv_self_held_bytes": report.kv_self_peak_bytes,
        "kv_cross_held_bytes": report.kv_cross_bytes,
        "kv_provenance": dict(report.kv_provenance),
        "engine_memory_bytes": dict(report.engine_memory_bytes),
        "per_clip": per_clip,
    }


def _format(row: dict) -> str:
    derived = "" if row["kv_provenance"]["self"] == MEASURED else " (derived)"
    return (
        f"| {row['beam']} | {'on' if row['flash_attn'] else 'off'} | {row['max_context']} | "
        f"{row['pooled_wer']:.3f} | {row['seconds']:.1f} | {row['x_real_time']:.1f} | "
        f"{row['kv_self_held_bytes'] / 1e6:.2f}{derived} | {row['kv_cross_held_bytes'] / 1e6:.2f} |"
    )


if __name__ == "__main__":
    main()
