"""whisper.cpp's KV cache types (F16, Q8_0, Q4_0; kvscribe's patched whisper-cli) and weight
types (F16, Q8_0, Q5_0) on the eval clips: WER, cache bytes, peak RSS and per-step times.

    .venv/bin/python benchmarks/whispercpp_kv_types.py [CLIPS_DIR] --model tiny.en --repeat 3
    KVSCRIBE_WHISPER_CLI=<a build without flash-attn-quantized-kv.patch> .venv/bin/python \
        benchmarks/whispercpp_kv_types.py --settings 3 --tag slow-fa   # the kernels' effect

Runs kvscribe's whispercpp backend (one whisper-cli child per clip, as users run it) with
cpu-laptop's settings (flash attention on, -mc -1) at beam 1 and beam 5, each cache / weight
setting replacing the policy and compute type. Runs are interleaved: each repeat walks the
clips, and every setting decodes a clip before the next clip starts, so slow spells of the
machine fall on every setting alike; one untimed warm-up clip per setting first.

Per setting: pooled WER (first repeat; whisper.cpp is deterministic here), kv self / kv cross
bytes as whisper.cpp prints them (one decoder; its log names the type) and as % of F16,
whisper-cli's peak RSS (largest over the clips, from wait4), and the medians over repeats of:
wall seconds over all clips, encode ms per window, prompt ms per token and decode ms per
step (whisper_print_timings: decode + batchd runs). Writes
benchmarks/results/whispercpp_kv_types_<model>[_<tag>].json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import corpus
import jiwer
import results_file
from whisper_normalizer.english import EnglishTextNormalizer

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest

# (label, self-attention policy, cross-attention policy, weights)
SETTINGS = [
    ("F16 KV", "full", "shared", "default"),
    ("Q8_0 KV", "q8_0", "shared,q8_0", "default"),
    ("Q4_0 KV", "q4_0", "shared,q4_0", "default"),
    ("Q8_0 cross only", "full", "shared,q8_0", "default"),
    ("F16 KV, Q8_0 weights", "full", "shared", "q8_0"),
    ("F16 KV, Q5_0 weights", "full", "shared", "q5_0"),
    ("Q8_0 KV, Q8_0 weights", "q8_0", "shared,q8_0", "q8_0"),
]
BEAMS = (1, 5)


def main() -> None:
    parser = argparse.ArgumentParser()
    default = corpus.CLIPS
    parser.add_argument("clips", nargs="?", type=Path, default=default)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--settings", type=int, default=len(SETTINGS), help="the first N only")
    parser.add_argument("--tag", default="", help="suffix of the results file's name")
    args = parser.parse_args()
    paths = sorted(args.clips.glob("*.wav"))
    clips = [(p.name, load_audio(p), p.with_suffix(".txt").read_text()) for p in paths]
    audio_seconds = sum(a.size for _, a, _ in clips) / 16000
    model = models.resolve(args.model, ("ggml",))
    cells = [(beam, *setting) for beam in BEAMS for setting in SETTINGS[: args.settings]]
    backends = [_backend(model, beam, s, c, w) for beam, _, s, c, w in cells]
    for backend in backends:  # warm-up (and quantize the weights once), not timed
        list(backend.transcribe(clips[0][1], DecodeRequest()).segments)
    runs: list[list[list[dict]]] = [[[] for _ in range(args.repeat)] for _ in cells]
    for rep in range(args.repeat):
        for name, samples, _ in clips:
            for index, backend in enumerate(backends):
                runs[index][rep].append(_decode(backend, name, samples))
            print(f"repeat {rep + 1}: {name} done", flush=True)
    rows = [_summary(cell, cell_runs, clips) for cell, cell_runs in zip(cells, runs, strict=True)]
    lines = _table(rows, len(clips), audio_seconds, args.repeat)
    print("\n".join(lines))
    meta = {
        "device": "cpu",
        "backend": "whispercpp",
        "profile": "cpu-laptop (flash attention on, -mc -1), beam and cache/weight types "
        "replaced per row",
        "model": model.name,
        "whisper_cli": rows[0]["settings"].get("whisper-cli"),
        "clips_dir": str(args.clips),
        "clips": len(clips),
        "audio_seconds": audio_seconds,
        "repeat": args.repeat,
        "timing": "medians over repeats; runs interleaved clip by clip across settings, "
        "after one untimed warm-up clip per setting",
        "kv_bytes": "whisper.cpp's printed kv self (one decoder) and kv cross sizes",
        "peak_rss": "whisper-cli child, wait4 ru_maxrss, largest over the clips",
    }
    name = f"whispercpp_kv_types_{model.name}" + (f"_{args.tag}" if args.tag else "")
    results_file.write(name, meta, rows, "\n".join(lines))


def _backend(model, beam: int, kv_self: str, kv_cross: str, weights: str):
    base = profile.load("cpu-laptop")
    settings = {"beam_size": beam, "flash_attn": True, "max_context": -1}
    if weights != "default":
        settings["compute_type"] = weights
    custom = dataclasses.replace(
        base, kv_self=kv_self, kv_cross=kv_cross, backends={**base.backends, "whispercpp": settings}
    )
    backend = registry.get("whispercpp")(model, custom, "cpu")
    backend.load()
    if kv_self != "full" or "q" in kv_cross:
        assert backend.cli.kv_types, "this benchmark needs kvscribe's whisper-cli"
    return backend


def _decode(backend, name: str, samples) -> dict:
    started = time.perf_counter()
    run = backend.transcribe(samples, DecodeRequest())
    text = "".join(s.text for s in run.segments)
    report = run.report
    return {
        "clip": name,
        "seconds": time.perf_counter() - started,
        "text": text,
        "timings_ms": dict(report.engine_timings_ms),
        "runs": dict(report.engine_runs),
        "memory": dict(report.engine_memory_bytes),
        "kv_types": dict(report.engine_kv_types),
        "peak_rss_bytes": report.engine_peak_rss_bytes,
        "settings": dict(report.settings),
    }


def _summary(cell, cell_runs: list[list[dict]], clips) -> dict:
    beam, label, kv_self, kv_cross, weights = cell
    normalize = EnglishTextNormalizer()
    first = cell_runs[0]
    references = [normalize(reference) for _, _, reference in clips]
    hypotheses = [normalize(run["text"]) for run in first]
    return {
        "beam": beam,
        "label": label,
        "kv_self_policy": kv_self,
        "kv_cross_policy": kv_cross,
        "weights": weights,
        "settings": first[-1]["settings"],
        "kv_types": first[-1]["kv_types"],
        "pooled_wer": jiwer.wer(references, hypotheses),
        "kv_self_bytes": first[-1]["memory"].get("kv self", 0),
        "kv_cross_bytes": first[-1]["memory"].get("kv cross", 0),
        "peak_rss_bytes": max(run["peak_rss_bytes"] or 0 for rep in cell_runs for run in rep),
        "seconds": statistics.median(sum(run["seconds"] for run in rep) for rep in cell_runs),
        "encode_ms_per_window": _median_per_step(cell_runs, ("encode",)),
        "prompt_ms_per_token": _median_per_step(cell_runs, ("prompt",)),
        "decode_ms_per_step": _median_per_step(cell_runs, ("decode", "batchd")),
        "seconds_per_repeat": [sum(run["seconds"] for run in rep) for rep in cell_runs],
        "per_clip": [
            {
                "clip": run["clip"],
                "wer": jiwer.wer(ref, normalize(run["text"])),
                "seconds": run["seconds"],
                "timings_ms": run["timings_ms"],
                "runs": run["runs"],
                "peak_rss_bytes": run["peak_rss_bytes"],
                "text": run["text"],
            }
            for run, ref in zip(first, references, strict=True)
        ],
    }


def _median_per_step(cell_runs: list[list[dict]], kinds: tuple[str, ...]) -> float | None:
    """Per repeat: the kinds' ms summed over the clips / their runs; the median of those."""
    values = []
    for rep in cell_runs:
        ms = sum(run["timings_ms"].get(kind, 0.0) for run in rep for kind in kinds)
        steps = sum(run["runs"].get(kind, 0) for run in rep for kind in kinds)
        if steps:
            values.append(ms / steps)
    return statistics.median(values) if values else None


def _table(rows: list[dict], clips: int, audio_seconds: float, repeat: int) -> list[str]:
    lines = [
        f"{clips} clips, {audio_seconds:.1f} s of audio; medians of {repeat} interleaved "
        "repeat(s); kv bytes as whisper.cpp prints them (self: one decoder)",
        "",
        "| beam | setting | pooled WER | kv self MB (% F16) | kv cross MB (% F16) "
        "| peak RSS MB | seconds | encode ms/window | prompt ms/token | decode ms/step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    reference: dict[int, dict] = {}
    for row in rows:
        if row["label"] == SETTINGS[0][0]:
            reference[row["beam"]] = row
        ref = reference[row["beam"]]
        lines.append(
            f"| {row['beam']} | {row['label']} | {row['pooled_wer']:.3f} "
            f"| {_mb_pct(row['kv_self_bytes'], ref['kv_self_bytes'])} "
            f"| {_mb_pct(row['kv_cross_bytes'], ref['kv_cross_bytes'])} "
            f"| {row['peak_rss_bytes'] / 1e6:.1f} | {row['seconds']:.1f} "
            f"| {_ms(row['encode_ms_per_window'])} | {_ms(row['prompt_ms_per_token'])} "
            f"| {_ms(row['decode_ms_per_step'])} |"
        )
    return lines


def _mb_pct(value: int, reference: int) -> str:
    return f"{value / 1e6:.2f} ({100 * value / reference:.0f} %)" if reference else "-"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
