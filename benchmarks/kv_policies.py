"""KV-cache policies side by side on the eval clips, transformers backend, one process.

    .venv/bin/python benchmarks/kv_policies.py [--model tiny.en] [--beam-size N]
        [--policy "full|shared" --policy "sink=4,window=128|shared,q8_0" ...]

Each policy is `SELF|CROSS`. Prints a markdown table: pooled WER (Whisper's English
normaliser), WER delta vs the first policy, whether every clip's tokens equal the
first policy's, self-attention KV held at peak vs a full cache (all clips, and the
long-form clip alone), cross-attention KV and transcribe time. Every byte figure is
measured from the cache's tensors. `kvscribe bench` runs the same policies as cells;
this is the script behind the README's policy table.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jiwer
from kvscribe.backends.base import DecodeRequest
from whisper_normalizer.english import EnglishTextNormalizer

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio

CLIPS = Path(__file__).resolve().parents[2] / "shared" / "eval" / "clips"
DEFAULT = [
    "full|full",  # what transformers itself holds
    "full|shared",  # cpu-laptop, gpu
    "full; half@layers=odd|shared",  # no-loss
    "sink=4,window=128|shared",
    "q8_0|shared,q8_0",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--policy", action="append")
    parser.add_argument("--clips", type=Path, default=CLIPS)
    args = parser.parse_args()
    clips = [
        (p.name, load_audio(p), p.with_suffix(".txt").read_text())
        for p in sorted(args.clips.glob("*.wav"))
    ]
    print(
        f"{len(clips)} clips, {sum(a.size for _, a, _ in clips) / 16000:.1f} s, "
        f"beam {args.beam_size}\n"
    )
    print(
        "| self policy | cross | pooled WER | dWER | same tokens | self KV held / full "
        "(all) | long-form | cross KV | transcribe s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    baseline = None
    for policy in args.policy or DEFAULT:
        row, tokens = _run(policy, clips, args)
        baseline = baseline or (row, tokens)
        print(_format(row, tokens, baseline))


def _run(policy: str, clips, args):
    self_policy, _, cross_policy = policy.partition("|")
    backend_cls = registry.get("transformers")
    chosen = dataclasses.replace(
        profile.load("cpu-laptop"), kv_self=self_policy, kv_cross=cross_policy or "full"
    )
    backend = backend_cls(models.resolve(args.model, ("transformers",)), chosen, "cpu")
    backend.load()
    request = DecodeRequest(beam_size=args.beam_size)
    list(backend.transcribe(clips[0][1], request).segments)  # warm-up
    normalize = EnglishTextNormalizer()
    row = {
        "self": self_policy,
        "cross": cross_policy,
        "errors": 0.0,
        "words": 0,
        "held": 0,
        "full": 0,
        "long_held": 0,
        "long_full": 0,
        "cross_bytes": 0,
        "seconds": 0.0,
    }
    tokens = {}
    for name, samples, reference in clips:
        started = time.perf_counter()
        run = backend.transcribe(samples, request)
        segments = list(run.segments)
        row["seconds"] += time.perf_counter() - started
        tokens[name] = [t for s in segments for t in s.tokens]
        ref, hyp = normalize(reference), normalize("".join(s.text for s in segments))
        row["errors"] += jiwer.wer(ref, hyp) * len(ref.split())
        row["words"] += len(ref.split())
        report = run.report
        row["held"] = max(row["held"], report.kv_self_peak_bytes)
        row["full"] = max(row["full"], report.kv_self_full_bytes)
        row["cross_bytes"] = max(row["cross_bytes"], report.kv_cross_bytes)
        if name.startswith("espeak_longform"):
            row["long_held"], row["long_full"] = (
                report.kv_self_peak_bytes,
                report.kv_self_full_bytes,
            )
    return row, tokens


def _format(row, tokens, baseline) -> str:
    wer = row["errors"] / row["words"]
    base_row, base_tokens = baseline
    delta = wer - base_row["errors"] / base_row["words"]
    same = sum(tokens[k] == base_tokens[k] for k in tokens)
    long_share = f"{100 * row['long_held'] / row['long_full']:.0f} %" if row["long_full"] else "-"
    return (
        f"| `{row['self']}` | `{row['cross']}` | {wer:.3f} | {delta:+.3f} | "
        f"{same}/{len(tokens)} | {row['held'] / 1e6:.2f} / {row['full'] / 1e6:.2f} MB "
        f"({100 * row['held'] / row['full']:.0f} %) | {long_share} | "
        f"{row['cross_bytes'] / 1e6:.1f} MB | {row['seconds']:.1f} |"
    )


if __name__ == "__main__":
    main()
