"""WER and speed of whisper.cpp settings (beams, flash attention, -mc) on the eval clips.

    .venv/bin/python benchmarks/whispercpp_settings.py [CLIPS_DIR] [--model NAME]

Runs kvscribe's whispercpp backend (one whisper-cli child per clip, as users
run it) for each setting in turn, after one untimed warm-up clip. Prints a
markdown table: pooled WER (Whisper's English normaliser), seconds, x real time,
and whisper.cpp's own kv self / kv cross / compute buffer sizes. The profiles'
[whispercpp] sections were chosen from this table.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jiwer
from kvscribe.backends.base import DecodeRequest
from whisper_normalizer.english import EnglishTextNormalizer

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio

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
    default = Path(__file__).resolve().parents[2] / "shared" / "eval" / "clips"
    parser.add_argument("clips", nargs="?", type=Path, default=default)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    clips = [
        (load_audio(p), p.with_suffix(".txt").read_text()) for p in sorted(args.clips.glob("*.wav"))
    ]
    audio_seconds = sum(a.size for a, _ in clips) / 16000
    print(f"{len(clips)} clips, {audio_seconds:.1f} s of audio\n")
    print("| beam | flash attn | -mc | pooled WER | seconds | x real time | kv self | kv cross |")
    print("|---|---|---|---|---|---|---|---|")
    model = models.resolve(args.model, ("ggml",))
    for beam, flash, context in SETTINGS:
        print(_row(model, clips, audio_seconds, beam, flash, context), flush=True)


def _row(model, clips, audio_seconds: float, beam: int, flash: bool, context: int) -> str:
    base = profile.load("cpu-laptop")
    settings = {"beam_size": beam, "flash_attn": flash, "max_context": context}
    custom = dataclasses.replace(base, backends={**base.backends, "whispercpp": settings})
    backend = registry.get("whispercpp")(model, custom, "cpu")
    backend.load()
    list(backend.transcribe(clips[0][0], DecodeRequest()).segments)  # warm-up, not timed
    normalize = EnglishTextNormalizer()
    references, hypotheses = [], []
    started = time.perf_counter()
    for samples, reference in clips:
        run = backend.transcribe(samples, DecodeRequest())
        hypotheses.append(normalize("".join(s.text for s in run.segments)))
        references.append(normalize(reference))
    elapsed = time.perf_counter() - started
    report = run.report
    error_rate = jiwer.wer(references, hypotheses)
    return (
        f"| {beam} | {'on' if flash else 'off'} | {context} | {error_rate:.3f} | "
        f"{elapsed:.1f} | {audio_seconds / elapsed:.1f} | "
        f"{report.kv_self_peak_bytes / 1e6:.2f} MB | {report.kv_cross_bytes / 1e6:.2f} MB |"
    )


if __name__ == "__main__":
    main()
