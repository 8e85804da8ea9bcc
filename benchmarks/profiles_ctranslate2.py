"""WER and speed of each profile on the eval clips, CTranslate2 backend, one process.

    .venv/bin/python benchmarks/profiles_ctranslate2.py [CLIPS_DIR] [--model NAME]

Prints a markdown table. Each profile's model is loaded once and warmed up on the
first clip before timing; WER is pooled over all words (Whisper's English normaliser).
The script behind the README's per-profile table; `kvscribe bench` measures the same and more.
Writes benchmarks/results/profiles_ctranslate2.json (per profile and per clip: errors,
words, WER, seconds) and profiles_ctranslate2.md (the printed table).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import corpus
import jiwer
import results_file
from whisper_normalizer.english import EnglishTextNormalizer

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest

PROFILES = ("cpu-laptop", "tiny-vram", "no-loss")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "clips",
        nargs="?",
        type=Path,
        default=corpus.CLIPS,
    )
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    paths = sorted(args.clips.glob("*.wav"))
    clips = [(p.name, load_audio(p), p.with_suffix(".txt").read_text()) for p in paths]
    audio_seconds = sum(a.size for _, a, _ in clips) / 16000
    model = models.resolve(args.model, ("ctranslate2",))
    lines = [
        f"{len(clips)} clips, {audio_seconds:.1f} s of audio",
        "",
        "| profile | compute type | beam | pooled WER | transcribe s | x real time |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    rows = []
    for name in PROFILES:
        row = _run(name, clips, model, audio_seconds)
        rows.append(row)
        lines.append(
            f"| {name} | {row['compute_type']} | {row['beam']} | {row['pooled_wer']:.3f} | "
            f"{row['transcribe_seconds']:.1f} | {row['x_real_time']:.1f} |"
        )
        print(lines[-1], flush=True)
    meta = {
        "device": "cpu",
        "backend": "ctranslate2",
        "model": model.name,
        "profiles": list(PROFILES),
        "clips_dir": str(args.clips),
        "clips": len(clips),
        "audio_seconds": audio_seconds,
        "timing": "transcribe s: all clips in one process after an untimed warm-up on the first",
    }
    results_file.write("profiles_ctranslate2", meta, rows, "\n".join(lines))


def _run(name: str, clips, model, audio_seconds: float) -> dict:
    backend_cls = registry.get("ctranslate2")
    backend = backend_cls(model, profile.load(name), "cpu")
    backend.load()
    list(backend.transcribe(clips[0][1], DecodeRequest()).segments)  # warm-up, not timed
    normalize = EnglishTextNormalizer()
    errors = words = 0.0
    per_clip = []
    started = time.perf_counter()
    for clip, samples, reference in clips:
        clip_started = time.perf_counter()
        run = backend.transcribe(samples, DecodeRequest())
        hypothesis = "".join(s.text for s in run.segments)
        clip_seconds = time.perf_counter() - clip_started
        n = len(normalize(reference).split())
        clip_wer = jiwer.wer(normalize(reference), normalize(hypothesis))
        errors += clip_wer * n
        words += n
        per_clip.append(
            {
                "clip": clip,
                "audio_seconds": samples.size / 16000,
                "words": n,
                "wer": clip_wer,
                "seconds": clip_seconds,
                "text": hypothesis,
            }
        )
    elapsed = time.perf_counter() - started
    settings = backend.describe_settings()
    return {
        "profile": name,
        "compute_type": settings["compute type"],
        "beam": run.report.settings.get("beam size", "?"),
        "settings": {**settings, **run.report.settings},
        "pooled_wer": errors / words,
        "errors": errors,
        "words": words,
        "transcribe_seconds": elapsed,
        "x_real_time": audio_seconds / elapsed,
        "per_clip": per_clip,
    }


if __name__ == "__main__":
    main()
