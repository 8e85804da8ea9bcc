"""Where batched chunks start and end: filling each window with speech, or ending a chunk
at a long pause so the next window starts there (Whisper may read the same words
differently depending on where they fall in its window).

    .venv/bin/python benchmarks/chunk_placement.py

The ctranslate2 backend (cpu-laptop: batch 8, beam 5; embedded tiny.en, base for the
French and Spanish recordings), in this process, on the long clips, under each chunk rule
(kvscribe.chunking.ChunkRules):

- fill (the default): speech regions joined, pauses cut out, until 30 s of speech;
- a pause of 2 s (or 1 s) ends a chunk: pauses cut out, but a longer one starts a window;
- contiguous spans: pauses kept in the audio, a pause over 2 s ends a chunk (the
  transformers backend's rule).

Per rule and clip: WER (Whisper's English normaliser, pooled), chunks decoded (tails
included) and transcribe seconds (one run each, in process: a guide, not a timing).
Writes benchmarks/results/chunk_placement.json and .md.
"""

from __future__ import annotations

import time
from pathlib import Path

import results_file

from kvscribe import models, profile, registry
from kvscribe.audio.stream import open_streamed
from kvscribe.backends import ctranslate2 as ct2_backend
from kvscribe.bench.wer import pooled_wer
from kvscribe.chunking import ChunkRules
from kvscribe.contract import DecodeRequest
from kvscribe.pipeline import transcribe_speech

EVAL = Path(__file__).resolve().parent.parent / "eval"
# clip -> (file, model, language)
CLIPS = {
    "espeak_longform_en": (EVAL / "clips" / "espeak_longform_en.wav", None, None),
    "asterisk_en_ivr_dev": (EVAL / "realform" / "asterisk_en_ivr_dev.wav", None, None),
    "asterisk_en_ivr_dev_noisy": (
        EVAL / "realform" / "asterisk_en_ivr_dev_noisy.wav",
        None,
        None,
    ),
    "joined_real": (EVAL / "clips_joined" / "joined_real.wav", None, None),
    "asterisk_fr_ivr_dev": (EVAL / "realform" / "asterisk_fr_ivr_dev.wav", "base", "fr"),
    "asterisk_es_ivr_dev": (EVAL / "realform" / "asterisk_es_ivr_dev.wav", "base", "es"),
}
ENGLISH = ("espeak_longform_en", "asterisk_en_ivr_dev", "asterisk_en_ivr_dev_noisy", "joined_real")
RULES = {
    "fill (default)": ChunkRules(max_gap=None, cut_pauses=True),
    "a 2 s pause ends a chunk": ChunkRules(max_gap=2.0, cut_pauses=True),
    "a 1 s pause ends a chunk": ChunkRules(max_gap=1.0, cut_pauses=True),
    "contiguous spans (pauses kept)": ChunkRules(max_gap=2.0, cut_pauses=False),
}


def main() -> None:
    backends = {name: _backend(name) for name in {model for _, model, _ in CLIPS.values()}}
    rows = []
    for rule_name, rules in RULES.items():
        ct2_backend.batched_rules = lambda vad, rules=rules: rules  # the rule under test
        for clip, (path, model, language) in CLIPS.items():
            run = _run(backends[model], path, language)
            rows.append({"rule": rule_name, "clip": clip, "model": model or "tiny.en", **run})
            print(rule_name, clip, rows[-1]["wer"], rows[-1]["chunks"], flush=True)
    lines = _report(rows)
    print("\n".join(lines))
    meta = {"model": "tiny.en", "device": "cpu", "profile": "cpu-laptop", "backend": "ctranslate2"}
    results_file.write("chunk_placement", meta, rows, "\n".join(lines))


def _backend(model: str | None):
    """The ctranslate2 backend, cpu-laptop, with `model` (None: the embedded tiny.en)."""
    backend_cls = registry.get("ctranslate2")
    resolved = models.resolve(model, backend_cls.capabilities.model_formats)
    backend = backend_cls(resolved, profile.load("cpu-laptop"), "cpu")
    backend.load()
    return backend


def _run(backend, path: Path, language: str | None) -> dict:
    audio = open_streamed(path)
    started = time.perf_counter()
    run = transcribe_speech(backend, audio, DecodeRequest(language=language))
    text = "".join(segment.text for segment in run.segments)
    seconds = time.perf_counter() - started
    reference = path.with_suffix(".txt").read_text(encoding="utf-8")
    return {
        "wer": pooled_wer([(reference, text)]),
        "reference": reference,
        "text": text,
        "chunks": run.report.windows,
        "seconds": round(seconds, 2),
    }


def _report(rows: list[dict]) -> list[str]:
    clips = list(CLIPS)
    lines = [
        "ctranslate2, cpu-laptop (batch 8, beam 5), tiny.en (French, Spanish: base); WER / "
        "chunks decoded per clip, English WER pooled, seconds summed over every clip (one "
        "run each, in process):",
        "",
        "| rule | " + " | ".join(clips) + " | pooled English WER | seconds |",
        "|---|" + "---|" * (len(clips) + 2),
    ]
    for rule in RULES:
        mine = [r for r in rows if r["rule"] == rule]
        cells = [f"{r['wer']:.3f} / {r['chunks']}" for r in mine]
        pooled = pooled_wer([(r["reference"], r["text"]) for r in mine if r["clip"] in ENGLISH])
        total = sum(r["seconds"] for r in mine)
        lines.append(f"| {rule} | " + " | ".join(cells) + f" | {pooled:.3f} | {total:.1f} |")
    return lines


if __name__ == "__main__":
    main()
