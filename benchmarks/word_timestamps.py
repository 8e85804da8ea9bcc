"""Word start times of each backend against faster-whisper's own word timestamps.

    .venv/bin/python benchmarks/word_timestamps.py [--model NAME] [--beam 5]

On samples/jfk.wav and three eval clips (real read speech), faster-whisper's
WhisperModel (the embedded CTranslate2 model, word_timestamps=True) is the reference;
every kvscribe backend transcribes the same audio with DecodeRequest(word_timestamps=True)
(profile cpu-laptop, sequential windows). Words are paired by normalised text in order
(difflib), and the table gives, per backend and clip, the median absolute difference of
the paired words' starts and ends, in seconds, and how many words paired.
Writes benchmarks/results/word_timestamps.{json,md}.
"""

from __future__ import annotations

import argparse
import difflib
import re
import statistics
from pathlib import Path

import corpus
import results_file

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest

ROOT = Path(__file__).resolve().parents[1]
EVAL = corpus.CLIPS
CLIPS = (
    ROOT / "samples" / "jfk.wav",
    EVAL / "ps_librivox_ss01_0870.wav",
    EVAL / "ps_librivox_ss01_0920.wav",
    EVAL / "ps_cards_001.wav",
)
BACKENDS = ("ctranslate2", "transformers", "whispercpp")
TARGET = 0.2  # seconds: the issue's bound on the median start difference


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--beam", type=int, default=5)
    args = parser.parse_args()
    clips = [(path.name, load_audio(path)) for path in CLIPS]
    reference = _faster_whisper_words(clips, args.model, args.beam)
    rows = []
    for name in BACKENDS:
        words = _backend_words(name, clips, args.model, args.beam)
        for clip, _ in clips:
            rows.append({"backend": name, "clip": clip, **_compare(reference[clip], words[clip])})
    lines = [
        f"Reference: faster-whisper's word timestamps, same model ({args.model or 'tiny.en'}), "
        f"beam {args.beam}. Seconds; median over the paired words.",
        "",
        "| backend | clip | words paired | median abs start diff s | median abs end diff s "
        f"| within {TARGET} s |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['backend']} | {row['clip']} | {row['paired']}/{row['reference_words']} | "
            f"{row['median_start_diff']:.3f} | {row['median_end_diff']:.3f} | "
            f"{'yes' if row['median_start_diff'] <= TARGET else 'no'} |"
        )
    markdown = "\n".join(lines)
    print(markdown)
    meta = {
        "device": "cpu",
        "model": args.model or "tiny.en",
        "beam": args.beam,
        "profile": "cpu-laptop",
        "clips": [str(path) for path in CLIPS],
        "target_median_start_diff_seconds": TARGET,
    }
    results_file.write("word_timestamps", meta, rows, markdown)


def _faster_whisper_words(clips, model_name, beam) -> dict[str, list[tuple[str, float, float]]]:
    from faster_whisper import WhisperModel

    model = models.resolve(model_name, ("ctranslate2",))
    engine = WhisperModel(str(model.path), device="cpu", compute_type="int8")
    found = {}
    for clip, samples in clips:
        segments, _ = engine.transcribe(samples, beam_size=beam, word_timestamps=True)
        found[clip] = [(w.word, w.start, w.end) for s in segments for w in s.words]
    return found


def _backend_words(name, clips, model_name, beam) -> dict[str, list[tuple[str, float, float]]]:
    backend_cls = registry.get(name)
    model = models.resolve(model_name, backend_cls.capabilities.model_formats)
    backend = backend_cls(model, profile.load("cpu-laptop"), "cpu")
    backend.load()
    request = DecodeRequest(beam_size=beam, batch_size=1, word_timestamps=True)
    found = {}
    for clip, samples in clips:
        segments = list(backend.transcribe(samples, request).segments)
        found[clip] = [(w.word, w.start, w.end) for s in segments for w in s.words]
    return found


def _normal(word: str) -> str:
    return re.sub(r"[^\w']", "", word.casefold())


def _compare(reference, words) -> dict:
    matcher = difflib.SequenceMatcher(
        a=[_normal(w) for w, _, _ in reference], b=[_normal(w) for w, _, _ in words], autojunk=False
    )
    pairs = [
        (reference[block.a + i], words[block.b + i])
        for block in matcher.get_matching_blocks()
        for i in range(block.size)
    ]
    starts = [abs(a[1] - b[1]) for a, b in pairs]
    ends = [abs(a[2] - b[2]) for a, b in pairs]
    return {
        "reference_words": len(reference),
        "backend_words": len(words),
        "paired": len(pairs),
        "median_start_diff": statistics.median(starts) if starts else float("nan"),
        "median_end_diff": statistics.median(ends) if ends else float("nan"),
        "max_start_diff": max(starts) if starts else float("nan"),
    }


if __name__ == "__main__":
    main()
