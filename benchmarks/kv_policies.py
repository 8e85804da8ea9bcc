"""KV-cache policies side by side on the eval clips, transformers backend, one process.

    .venv/bin/python benchmarks/kv_policies.py [--model tiny.en] [--beam-size N]
        [--batch-size N] [--policy "full|shared" --policy "sink=4,window=128|shared,q8_0" ...]
        [--clips DIR | --clip FILE --clip FILE ...] [--results-name NAME]

Each policy is `SELF|CROSS`; clips decode sequentially (batch size 1) unless --batch-size
says otherwise (speech chunks of a file over 30 s decoded N at a time). Prints a
markdown table: pooled WER (Whisper's English normaliser), WER delta vs the first
policy, whether every clip's tokens equal the first policy's, self-attention KV held
at peak vs a full cache (all clips, and the long-form clip alone), cross-attention KV
held and transcribe time. Every byte figure is measured from the storage the cache
holds. `kvscribe bench` runs the same policies as cells; this is the script behind the
README's policy tables. Writes benchmarks/results/NAME.json (per policy and per clip:
errors, words, WER, bytes, seconds, tokens equal to the first policy's) and NAME.md
(the printed table); NAME is kv_policies_beamN unless --results-name says otherwise
(for a run beside the README's two, so it does not overwrite one of them).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import corpus
import jiwer
import results_file
from whisper_normalizer.english import EnglishTextNormalizer

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest

CLIPS = corpus.CLIPS
LONG_FORM = "espeak_longform"  # the long-form clip's name starts so
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
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--clips", type=Path, default=CLIPS)
    parser.add_argument("--clip", type=Path, action="append", help="instead of --clips")
    parser.add_argument("--results-name", help="default: kv_policies_beamN")
    args = parser.parse_args()
    paths = args.clip or sorted(args.clips.glob("*.wav"))
    clips = [(p.name, load_audio(p), p.with_suffix(".txt").read_text()) for p in paths]
    audio_seconds = sum(a.size for _, a, _ in clips) / 16000
    model = models.resolve(args.model, ("transformers",))
    lines = [
        f"{len(clips)} clips, {audio_seconds:.1f} s, beam {args.beam_size}, "
        f"batch size {args.batch_size}",
        "",
        "| self policy | cross | pooled WER | dWER | same tokens | self KV held / full "
        "(all, MB) | long-form | cross KV held (MB) | transcribe s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    policies = args.policy or DEFAULT
    rows, baseline, settings = [], None, {}
    for policy in policies:
        row, tokens, settings = _run(policy, clips, model, args)
        baseline = baseline or (row, tokens)
        _compare(row, tokens, baseline)
        rows.append(row)
        lines.append(_format(row))
        print(lines[-1], flush=True)
    meta = {
        "device": "cpu",
        "backend": "transformers",
        "profile": "cpu-laptop with kv_self / kv_cross replaced per row, "
        f"batch size {args.batch_size}",
        "dtype": settings.get("dtype"),
        "previous_text_prompt": settings.get("previous-text prompt"),
        "model": model.name,
        "beam_size": args.beam_size,
        "policies": policies,
        "clips_dir": str(args.clips) if not args.clip else None,
        "clip_files": [str(p) for p in args.clip or ()],
        "clips": len(clips),
        "audio_seconds": audio_seconds,
        "timing": "transcribe s: sum over clips, one process, after an untimed warm-up "
        "on the first clip",
        "kv_bytes": "held: storage the cache holds at its peak (measured); full: what a full "
        "cache holds for the same positions; (all): the largest over clips of each",
    }
    name = args.results_name or f"kv_policies_beam{args.beam_size}"
    results_file.write(name, meta, rows, "\n".join(lines))


def _run(policy: str, clips, model, args):
    self_policy, _, cross_policy = policy.partition("|")
    backend_cls = registry.get("transformers")
    chosen = dataclasses.replace(
        profile.load("cpu-laptop"), kv_self=self_policy, kv_cross=cross_policy or "full"
    )
    backend = backend_cls(model, chosen, "cpu")
    backend.load()
    # Sequential by default, one window after another: where a policy's window meets
    # long-form speech (a batch cuts a long clip into chunks of at most 30 s).
    request = DecodeRequest(beam_size=args.beam_size, batch_size=args.batch_size)
    list(backend.transcribe(clips[0][1], request).segments)  # warm-up
    normalize = EnglishTextNormalizer()
    row = {
        "self": self_policy,
        "cross": cross_policy,
        "errors": 0.0,
        "words": 0,
        "self_held_bytes": 0,
        "self_full_bytes": 0,
        "long_form_self_held_bytes": 0,
        "long_form_self_full_bytes": 0,
        "cross_held_bytes": 0,
        "transcribe_seconds": 0.0,
        "per_clip": [],
    }
    tokens = {}
    for name, samples, reference in clips:
        started = time.perf_counter()
        run = backend.transcribe(samples, request)
        segments = list(run.segments)
        seconds = time.perf_counter() - started
        row["transcribe_seconds"] += seconds
        tokens[name] = [t for s in segments for t in s.tokens]
        ref, hyp = normalize(reference), normalize("".join(s.text for s in segments))
        clip_wer = jiwer.wer(ref, hyp)
        row["errors"] += clip_wer * len(ref.split())
        row["words"] += len(ref.split())
        report = run.report
        row["self_held_bytes"] = max(row["self_held_bytes"], report.kv_self_peak_bytes)
        row["self_full_bytes"] = max(row["self_full_bytes"], report.kv_self_full_bytes)
        row["cross_held_bytes"] = max(row["cross_held_bytes"], report.kv_cross_bytes)
        if name.startswith(LONG_FORM):
            row["long_form_self_held_bytes"], row["long_form_self_full_bytes"] = (
                report.kv_self_peak_bytes,
                report.kv_self_full_bytes,
            )
        row["per_clip"].append(
            {
                "clip": name,
                "audio_seconds": samples.size / 16000,
                "words": len(ref.split()),
                "wer": clip_wer,
                "seconds": seconds,
                "tokens": len(tokens[name]),
                "self_held_bytes": report.kv_self_peak_bytes,
                "self_full_bytes": report.kv_self_full_bytes,
                "cross_held_bytes": report.kv_cross_bytes,
                "kv_provenance": dict(report.kv_provenance),
            }
        )
    return row, tokens, dict(report.settings)


def _compare(row, tokens, baseline) -> None:
    """WER, its delta and same-token counts against the first policy, into the row."""
    base_row, base_tokens = baseline
    row["pooled_wer"] = row["errors"] / row["words"]
    row["wer_delta"] = row["pooled_wer"] - base_row["errors"] / base_row["words"]
    for clip in row["per_clip"]:
        clip["same_tokens"] = tokens[clip["clip"]] == base_tokens[clip["clip"]]
    row["same_tokens"] = sum(tokens[k] == base_tokens[k] for k in tokens)
    row["clips"] = len(tokens)


def _format(row) -> str:
    held, full = row["long_form_self_held_bytes"], row["long_form_self_full_bytes"]
    long_share = f"{100 * held / full:.0f} %" if full else "-"
    return (
        f"| `{row['self']}` | `{row['cross']}` | {row['pooled_wer']:.3f} | "
        f"{row['wer_delta']:+.3f} | {row['same_tokens']}/{row['clips']} | "
        f"{row['self_held_bytes'] / 1e6:.2f} / {row['self_full_bytes'] / 1e6:.2f} "
        f"({100 * row['self_held_bytes'] / row['self_full_bytes']:.0f} %) | {long_share} | "
        f"{row['cross_held_bytes'] / 1e6:.1f} | {row['transcribe_seconds']:.1f} |"
    )


if __name__ == "__main__":
    main()
