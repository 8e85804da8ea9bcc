"""kvscribe's transformers backend vs faster-whisper called directly, same clip, same run.

    .venv/bin/python benchmarks/longform_vs_faster_whisper.py [AUDIO] [--repeat 3]

Both decode with beam 5 and previous-text conditioning on the same decoded audio;
faster-whisper runs int8 (its CPU default), kvscribe the cpu-laptop profile (fp32,
full self-attention cache, shared cross-attention). Runs are interleaved so machine
drift hits both alike; medians are printed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from kvscribe.backends.base import DecodeRequest

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio

LONG_FORM = (
    Path(__file__).resolve().parents[2] / "shared" / "eval" / "clips" / "espeak_longform_en.wav"
)


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
    print(f"{args.audio.name}: {audio:.1f} s of audio, {args.repeat} runs each, beam 5\n")
    print("| engine | median s | x real time |")
    print("|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.1f} | {audio / median:.1f} |")
    fw, kv = (statistics.median(v) for v in times.values())
    print(f"\nkvscribe transformers / faster-whisper: {kv / fw:.2f}x")


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
    return lambda samples: list(backend.transcribe(samples, DecodeRequest(beam_size=5)).segments)


if __name__ == "__main__":
    main()
