"""kvscribe's transformers backend vs faster-whisper called directly, same clip, same run.

    .venv/bin/python benchmarks/longform_vs_faster_whisper.py [AUDIO] [--repeat 3]

Both decode with beam 5 and previous-text conditioning on the same decoded audio;
faster-whisper runs int8 (its CPU default), kvscribe the cpu-laptop profile (fp32,
full self-attention cache, shared cross-attention) at batch size 1 (sequential, as
faster-whisper's transcribe decodes). Runs are interleaved so machine
drift hits both alike; medians are printed. Writes
benchmarks/results/longform_vs_faster_whisper.json (every run's seconds per engine) and
longform_vs_faster_whisper.md (the printed table and ratio).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import time
from pathlib import Path

import corpus
import results_file

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest

LONG_FORM = corpus.CLIPS / "espeak_longform_en.wav"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("audio", nargs="?", type=Path, default=LONG_FORM)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    samples = load_audio(args.audio)
    runners = {
        "faster-whisper int8 (direct)": _faster_whisper(),
        "kvscribe transformers": _kvscribe(),
    }
    for run in runners.values():
        run(samples[: 16000 * 5])  # warm-up
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.repeat):
        for name, run in runners.items():
            started = time.perf_counter()
            run(samples)
            times[name].append(time.perf_counter() - started)
    audio = samples.size / 16000
    lines = [
        f"{args.audio.name}: {audio:.1f} s of audio, {args.repeat} runs each, beam 5",
        "",
        "| engine | median s | x real time |",
        "|---|---|---|",
    ]
    rows = []
    for name, values in times.items():
        median = statistics.median(values)
        rows.append(
            {
                "engine": name,
                "runs_seconds": values,
                "median_seconds": median,
                "x_real_time": audio / median,
            }
        )
        lines.append(f"| {name} | {median:.1f} | {audio / median:.1f} |")
    fw, kv = (statistics.median(v) for v in times.values())
    lines += ["", f"kvscribe transformers / faster-whisper: {kv / fw:.2f}x"]
    print("\n".join(lines))
    meta = {
        "device": "cpu",
        "audio": args.audio.name,
        "audio_seconds": audio,
        "repeat": args.repeat,
        "beam_size": 5,
        "condition_on_previous_text": True,
        "model": "tiny.en",
        "engines": {
            "faster-whisper int8 (direct)": "faster_whisper.WhisperModel, compute_type int8, "
            f"faster-whisper {_version('faster-whisper')}",
            "kvscribe transformers": "kvscribe transformers backend, profile cpu-laptop "
            "(fp32, full self-attention cache, shared cross-attention), batch size 1",
        },
        "timing": "wall clock per whole-clip transcribe, engines interleaved, after a 5 s warm-up",
        "kvscribe_over_faster_whisper": kv / fw,
    }
    results_file.write("longform_vs_faster_whisper", meta, rows, "\n".join(lines))


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _faster_whisper():
    from faster_whisper import WhisperModel

    model = WhisperModel(
        str(models.resolve("tiny.en", ("ctranslate2",)).path), device="cpu", compute_type="int8"
    )

    def run(samples):
        segments, _ = model.transcribe(samples, beam_size=5, condition_on_previous_text=True)
        return list(segments)

    return run


def _kvscribe():
    backend_cls = registry.get("transformers")
    backend = backend_cls(
        models.resolve("tiny.en", ("transformers",)), profile.load("cpu-laptop"), "cpu"
    )
    backend.load()
    # Sequential (batch 1), like faster-whisper's transcribe: the profile's batch of 8
    # would decode chunks side by side without previous-text conditioning.
    request = DecodeRequest(beam_size=5, batch_size=1)
    return lambda samples: list(backend.transcribe(samples, request).segments)


if __name__ == "__main__":
    main()
