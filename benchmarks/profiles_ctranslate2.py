"""WER and speed of each profile on the eval clips, CTranslate2 backend, one process.

    .venv/bin/python benchmarks/profiles_ctranslate2.py [CLIPS_DIR] [--model NAME]

Prints a markdown table. Each profile's model is loaded once and warmed up on the
first clip before timing; WER is pooled over all words (Whisper's English normaliser).
The script behind the README's per-profile table; `kvscribe bench` measures the same and more.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jiwer
from kvscribe.backends.base import DecodeRequest
from whisper_normalizer.english import EnglishTextNormalizer

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio

PROFILES = ("cpu-laptop", "tiny-vram", "no-loss")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "clips",
        nargs="?",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "eval" / "clips",
    )
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    clips = [
        (load_audio(p), p.with_suffix(".txt").read_text()) for p in sorted(args.clips.glob("*.wav"))
    ]
    audio_seconds = sum(a.size for a, _ in clips) / 16000
    print(f"{len(clips)} clips, {audio_seconds:.1f} s of audio\n")
    print("| profile | compute type | beam | pooled WER | transcribe s | x real time |")
    print("|---|---|---|---|---|---|")
    for name in PROFILES:
        print(_row(name, clips, args.model, audio_seconds))


def _row(name: str, clips, model_name: str | None, audio_seconds: float) -> str:
    backend_cls = registry.get("ctranslate2")
    backend = backend_cls(models.resolve(model_name, ("ctranslate2",)), profile.load(name), "cpu")
    backend.load()
    list(backend.transcribe(clips[0][0], DecodeRequest()).segments)  # warm-up, not timed
    normalize = EnglishTextNormalizer()
    errors = words = 0.0
    started = time.perf_counter()
    for samples, reference in clips:
        run = backend.transcribe(samples, DecodeRequest())
        hypothesis = "".join(s.text for s in run.segments)
        n = len(normalize(reference).split())
        errors += jiwer.wer(normalize(reference), normalize(hypothesis)) * n
        words += n
    elapsed = time.perf_counter() - started
    settings = backend.describe_settings()
    beam = run.report.settings.get("beam size", "?")
    return (
        f"| {name} | {settings['compute type']} | {beam} | {errors / words:.3f} | "
        f"{elapsed:.1f} | {audio_seconds / elapsed:.1f} |"
    )


if __name__ == "__main__":
    main()
