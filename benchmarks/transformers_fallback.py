"""Temperature fallback in the transformers backend against the ctranslate2 backend's
(faster-whisper's own), pooled WER on the eval clips, one process.

    .venv/bin/python benchmarks/transformers_fallback.py [--beam-size 5]
        [--batch-size 1 --batch-size 8] [--manifest benchmarks/eval_clips.tsv]
        [--results-name NAME]

Per batch size, three rows: ctranslate2 (faster-whisper's fallback), transformers with
fallback (the request's defaults: openai-whisper's temperatures 0.0-1.0 step 0.2, best
of 5, compression > 2.4, logprob < -1.0, no speech > 0.6) and transformers without
(temperature 0.0 only). Everything else is the cpu-laptop profile (tiny.en unless
--model; ctranslate2 int8, transformers float32). Batch size 1 is the sequential,
previous-text-conditioned path; a larger one the batched path on clips over 30 s (the
profile's default is 8). Prints a markdown table (pooled WER, its difference from
ctranslate2's at the same batch size, re-decoded windows, transcribe time) and the clips
whose WER differs between the rows; writes benchmarks/results/NAME.json (per row and
clip: WER, words, the windows decoded above temperature 0 and at which temperature,
the highest compression ratio) and NAME.md. NAME: transformers_fallback_beamN.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jiwer
import results_file
from whisper_normalizer.english import EnglishTextNormalizer

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest
from kvscribe.decoding import Fallback

HERE = Path(__file__).resolve().parent
ROWS = [  # (label, backend, fallback)
    ("ctranslate2", "ctranslate2", Fallback()),
    ("transformers + fallback", "transformers", Fallback()),
    ("transformers, no fallback", "transformers", Fallback(temperatures=(0.0,))),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--batch-size", type=int, action="append")
    parser.add_argument("--manifest", type=Path, default=HERE / "eval_clips.tsv")
    parser.add_argument("--results-name")
    args = parser.parse_args()
    clips = _clips(args.manifest)
    batch_sizes = args.batch_size or [1, 8]
    lines = [
        f"{len(clips)} clips ({sum(a.size for _, a, _ in clips) / 16000:.1f} s), "
        f"beam {args.beam_size}, cpu-laptop profile, device cpu",
        "",
        "| batch size | backend | pooled WER | vs ctranslate2 | windows re-decoded "
        "| segments above T=0 | transcribe s |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    rows = []
    backends = {name: _backend(name, args.model) for name in {b for _, b, _ in ROWS}}
    for batch in batch_sizes:
        baseline = None
        for label, name, fallback in ROWS:
            request = DecodeRequest(beam_size=args.beam_size, batch_size=batch, fallback=fallback)
            row = _run(backends[name], clips, request)
            row.update(label=label, backend=name, batch_size=batch)
            row["temperatures"] = list(fallback.temperatures)
            baseline = baseline or row
            row["wer_vs_ctranslate2"] = row["pooled_wer"] - baseline["pooled_wer"]
            rows.append(row)
            lines.append(_format(row))
            print(lines[-1], flush=True)
    differences = _differences(rows)
    lines += ["", *differences]
    print("\n" + "\n".join(differences), flush=True)
    model = models.resolve(args.model, ("transformers",)).name
    meta = {
        "device": "cpu",
        "profile": "cpu-laptop",
        "model": model,
        "beam_size": args.beam_size,
        "batch_sizes": batch_sizes,
        "manifest": str(args.manifest.relative_to(HERE.parent)),
        "clips": len(clips),
        "timing": "transcribe s: sum over clips, one process, after an untimed warm-up "
        "on the first clip; rows run one after another (not interleaved)",
        "fallback": "transformers rows: DecodeRequest.fallback as named by their temperatures "
        "(other thresholds the defaults); ctranslate2: the request's defaults",
    }
    name = args.results_name or f"transformers_fallback_beam{args.beam_size}"
    results_file.write(name, meta, rows, "\n".join(lines))


def _clips(manifest: Path) -> list[tuple[str, object, str]]:
    """(name, samples, reference text) of each row of a kvscribe bench manifest."""
    rows = [
        line.split("\t")
        for line in manifest.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ][1:]  # the header
    clips = []
    for audio, reference in rows:
        audio_path = (manifest.parent / audio).resolve()
        text = (manifest.parent / reference.strip()).read_text(encoding="utf-8")
        clips.append((audio_path.name, load_audio(audio_path), text))
    return clips


def _backend(name: str, model: str | None):
    backend_cls = registry.get(name)
    chosen = dataclasses.replace(profile.load("cpu-laptop"), device="cpu")
    backend = backend_cls(
        models.resolve(model, backend_cls.capabilities.model_formats), chosen, "cpu"
    )
    backend.load()
    return backend


def _run(backend, clips, request: DecodeRequest) -> dict:
    list(backend.transcribe(clips[0][1], request).segments)  # warm-up
    normalize = EnglishTextNormalizer()
    references, hypotheses, per_clip, seconds, redecoded = [], [], [], 0.0, 0
    for name, samples, reference in clips:
        started = time.perf_counter()
        run = backend.transcribe(samples, request)
        segments = list(run.segments)
        seconds += time.perf_counter() - started
        ref, hyp = normalize(reference), normalize("".join(s.text for s in segments))
        references.append(ref)
        hypotheses.append(hyp)
        clip_redecoded = int(run.report.settings.get("fallback re-decodes", 0))
        redecoded += clip_redecoded
        per_clip.append(
            {
                "clip": name,
                "words": len(ref.split()),
                "wer": jiwer.wer(ref, hyp),
                "redecoded": clip_redecoded,
                "above_zero": sorted(
                    {(s.seek, s.temperature) for s in segments if (s.temperature or 0) > 0}
                ),
                "max_compression_ratio": max(
                    (s.compression_ratio or 0.0 for s in segments), default=0.0
                ),
                "text": "".join(s.text for s in segments),
            }
        )
    return {
        "pooled_wer": jiwer.wer(references, hypotheses),
        "transcribe_seconds": seconds,
        "redecoded": redecoded,
        "segments_above_zero": sum(len(c["above_zero"]) for c in per_clip),
        "per_clip": per_clip,
    }


def _format(row: dict) -> str:
    redecoded = row["redecoded"] if row["backend"] == "transformers" else "-"
    return (
        f"| {row['batch_size']} | {row['label']} | {row['pooled_wer']:.3f} | "
        f"{row['wer_vs_ctranslate2']:+.3f} | {redecoded} | {row['segments_above_zero']} | "
        f"{row['transcribe_seconds']:.1f} |"
    )


def _differences(rows: list[dict]) -> list[str]:
    """Clips whose WER differs between the rows of one batch size, per clip and row."""
    lines = ["Clips whose WER differs between rows (WER per row, in table order):", ""]
    for batch in sorted({r["batch_size"] for r in rows}):
        group = [r for r in rows if r["batch_size"] == batch]
        for index, clip in enumerate(group[0]["per_clip"]):
            wers = [r["per_clip"][index]["wer"] for r in group]
            if max(wers) - min(wers) > 1e-9:
                shown = " / ".join(f"{w:.3f}" for w in wers)
                lines.append(f"- batch {batch}, {clip['clip']} ({clip['words']} words): {shown}")
    return lines


if __name__ == "__main__":
    main()
