"""Finished chunks in a batch: drop their rows (compaction, kvscribe's way) or keep them,
fed end-of-text and ignored (what a masked batch does). One process, transformers backend.

    .venv/bin/python benchmarks/batched_compaction.py [--repeat 3] [--beam-size 5]

Decodes the long-form clip's speech chunks as one batch (cpu-laptop policy), both ways
interleaved, and records the decoder's seconds (median), the self-attention KV held at
peak, the cross-attention KV held after the fill, and whether the tokens are identical.
Writes benchmarks/results/batched_compaction.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import corpus
import results_file

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.chunking import speech_chunks
from kvscribe.contract import DecodeRequest
from kvscribe.stepped import batched, longform

LONG_FORM = corpus.CLIPS / "espeak_longform_en.wav"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--beam-size", type=int, default=5)
    args = parser.parse_args()
    backend = registry.get("transformers")(
        models.resolve(None, ("transformers",)), profile.load("cpu-laptop"), "cpu"
    )
    backend.load()
    audio = load_audio(LONG_FORM)
    chunks = speech_chunks(audio)
    mels = [backend._chunk_mel(audio[c.start : c.end]) for c in chunks]
    plan = backend._plan("en", "transcribe", args.beam_size)
    prompt = batched.full_prompt(plan, [])
    list(backend.transcribe(audio[: 40 * 16000], DecodeRequest(batch_size=2)).segments)  # warm-up
    runs: dict[str, list[float]] = {"compact": [], "masked": []}
    figures: dict[str, dict] = {}
    for _ in range(args.repeat):
        for way in runs:
            stats = longform.WindowStats()
            started = time.perf_counter()
            results = batched.decode_batch(plan, mels, prompt, stats, compact=way == "compact")
            runs[way].append(time.perf_counter() - started)
            figures[way] = {
                "tokens": [r.tokens for r in results],
                "self_peak_bytes": stats.self_peak_bytes,
                "cross_bytes": stats.cross_bytes,
                "steps": len(stats.step_seconds),
            }
    same = figures["compact"]["tokens"] == figures["masked"]["tokens"]
    lines = [
        f"long-form clip ({audio.size / 16000:.1f} s) as one batch of {len(chunks)} chunks, "
        f"beam {args.beam_size}, cpu-laptop policy (`{backend.profile.kv_self}` / "
        f"`{backend.profile.kv_cross}`), float32; median of {args.repeat} interleaved runs "
        "(encoder included)",
        "",
        "| finished chunks | decode s (median) | runs s | self KV peak (MB) | cross KV (MB) "
        "| steps | same tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = []
    for way, seconds in runs.items():
        row = {"way": way, "seconds": seconds, "median_seconds": statistics.median(seconds)}
        row |= {k: v for k, v in figures[way].items() if k != "tokens"}
        rows.append(row)
        lines.append(
            f"| {'dropped (compact)' if way == 'compact' else 'kept, masked'} | "
            f"{row['median_seconds']:.2f} | {', '.join(f'{s:.2f}' for s in seconds)} | "
            f"{row['self_peak_bytes'] / 1e6:.1f} | {row['cross_bytes'] / 1e6:.1f} | "
            f"{row['steps']} | {'yes' if same else 'no'} |"
        )
    print("\n".join(lines))
    meta = {
        "device": "cpu",
        "model": backend.model.name,
        "beam_size": args.beam_size,
        "chunks": len(chunks),
        "same_tokens": same,
        "kv_bytes": "storage held (measured); self: peak over the decode",
    }
    results_file.write("batched_compaction", meta, rows, "\n".join(lines))


if __name__ == "__main__":
    main()
