"""The onnx backend against the transformers backend on the eval clips: same weights, same
decoding, WER and tokens.

    .venv/bin/python benchmarks/onnx_parity.py [--beam 5] [--out onnx_parity]

Every clip of benchmarks/eval_clips.tsv (real and synthetic English speech, eval/) is
transcribed in this process by the transformers backend (float32) and by the onnx backend
on the float32 and the int8 graphs (run `kvscribe setup onnx --compute-type int8` first),
all under profile cpu-laptop's cache policies and decoding (beam `--beam`, temperature
fallback, previous-text prompts; files over 30 s batched as the profile says). The table
gives each clip's WER (kvscribe.bench.wer: Whisper's English normaliser), whether its
tokens equal the transformers backend's, and the pooled WER of each. Writes
benchmarks/results/OUT.{json,md}.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
from pathlib import Path

import results_file

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.bench.wer import pooled_wer
from kvscribe.contract import DecodeRequest

HERE = Path(__file__).resolve().parent
CONFIGS = {  # name -> (backend, [onnx] compute type)
    "transformers": ("transformers", None),
    "onnx float32": ("onnx", "float32"),
    "onnx int8": ("onnx", "int8"),
}


def clips() -> list[tuple[Path, str]]:
    """(audio, reference text) of every eval clip the benchmarks share."""
    rows = (line for line in (HERE / "eval_clips.tsv").open() if not line.startswith("#"))
    found = []
    for row in csv.DictReader(rows, delimiter="\t"):
        audio, text = (HERE / row["audio"]).resolve(), (HERE / row["reference"]).resolve()
        found.append((audio, text.read_text(encoding="utf-8")))
    return found


def backend(name: str, compute_type: str | None):
    chosen = profile.load("cpu-laptop")
    if compute_type is not None:
        section = {**chosen.settings_for(name), "compute_type": compute_type}
        chosen = dataclasses.replace(chosen, backends={**chosen.backends, name: section})
    backend_cls = registry.get(name)
    model = models.resolve(None, backend_cls.capabilities.model_formats)
    loaded = backend_cls(model, chosen, "cpu")
    loaded.load()
    return loaded


def transcripts(config: str, audio: list, beam: int) -> list[tuple[str, list[int]]]:
    """(text, every segment's tokens joined) of each clip."""
    engine = backend(*CONFIGS[config])
    out = []
    for samples in audio:
        segments = list(engine.transcribe(samples, DecodeRequest(beam_size=beam)).segments)
        tokens = [t for s in segments for t in s.tokens]
        out.append((" ".join(s.text.strip() for s in segments), tokens))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--out", default="onnx_parity")
    args = parser.parse_args()
    corpus = clips()
    audio = [load_audio(path) for path, _ in corpus]
    got = {config: transcripts(config, audio, args.beam) for config in CONFIGS}
    rows = []
    for index, (path, reference) in enumerate(corpus):
        row = {"clip": path.stem, "seconds": round(audio[index].size / 16000, 1)}
        for config in CONFIGS:
            text, tokens = got[config][index]
            row[config] = {
                "wer": pooled_wer([(reference, text)]),
                "same_tokens": tokens == got["transformers"][index][1],
                "text": text,
            }
        rows.append(row)
    pooled = {
        config: pooled_wer([(ref, got[config][i][0]) for i, (_, ref) in enumerate(corpus)])
        for config in CONFIGS
    }
    same = {config: sum(r[config]["same_tokens"] for r in rows) for config in CONFIGS}
    table = markdown(rows, pooled, same, args.beam)
    print(table)
    meta = {
        "device": "cpu",
        "profile": "cpu-laptop",
        "beam_size": args.beam,
        "configs": {name: {"backend": b, "compute_type": c} for name, (b, c) in CONFIGS.items()},
        "pooled_wer": pooled,
        "same_tokens_as_transformers": same,
        "wer": "kvscribe.bench.wer.pooled_wer (Whisper's English normaliser)",
    }
    results_file.write(args.out, meta, rows, table)


def markdown(rows: list[dict], pooled: dict, same: dict, beam: int) -> str:
    names = list(CONFIGS)
    lines = [
        f"Eval clips, profile cpu-laptop, beam {beam}, tiny.en, device cpu. WER per clip; "
        "`=` where the tokens equal the transformers backend's.",
        "",
        "| clip | s | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for row in rows:
        cells = [
            f"{row[n]['wer']:.3f}" + (" =" if n != "transformers" and row[n]["same_tokens"] else "")
            for n in names
        ]
        lines.append(f"| {row['clip']} | {row['seconds']} | " + " | ".join(cells) + " |")
    lines.append("| **pooled** | | " + " | ".join(f"**{pooled[n]:.3f}**" for n in names) + " |")
    lines.append(
        "| tokens = transformers' | | "
        + " | ".join(f"{same[n]} / {len(rows)}" for n in names)
        + " |"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
