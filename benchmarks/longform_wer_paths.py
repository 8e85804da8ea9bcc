"""The long-form accuracy bar on every compute path CTranslate2 can take on this CPU: faster-whisper
sequential (beam 5) and kvscribe's default, each WER per recording and path.

    .venv/bin/python benchmarks/longform_wer_paths.py [--clips A,B] [--oldest AVX2|AVX]
        [--threads 2] [--out longform_wer_paths] [--made DIR]

Issue 55's bar is kvscribe's default within faster-whisper sequential's WER + 0.005 on each
recording. Both decode in int8, whose kernels round differently on each path
(tests/ct2_paths.py: Intel MKL or oneDNN, each instruction set), and faster-whisper's
sequential decode feeds each window the text before it, so one token decoded
differently moves the rest of a recording: the bar itself moves with the machine. This
script runs both, once each, on every recording of benchmarks/longform_peers.py (the same
commands, model files and threads; with --made DIR, the recordings
eval/realform/make_asterisk.py made there instead, e.g. its holdout part) under every
path, and writes the WERs, the difference and the reference words lost in runs of five
or more. Nothing is timed
(the MKL lanes on a CPU that is not Intel's preload tests/mkl_cpu_type.c).

Writes benchmarks/results/OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import results_file  # noqa: E402
from longform_peers import CLIPS, _names, made_clips, timed_run, warm_cache  # noqa: E402

from tests.ct2_paths import available, cpu_vendor  # noqa: E402

CONFIGS = ("fw-sequential", "kvscribe-default")


def measure(clips, paths, threads: int) -> list[dict]:
    rows = []
    for path in paths:
        environment = path.environment()
        for clip in clips:
            row = {"path": path.name, "clip": clip.name}
            for config in CONFIGS:
                run = timed_run(config, clip, threads, environment)
                if run["returncode"]:
                    sys.exit(f"{config} on {clip.name} ({path.name}) failed:\n{run['error']}")
                row[config] = {k: run[k] for k in ("wer", "lost_in_runs", "text")}
            row["difference"] = row["kvscribe-default"]["wer"] - row["fw-sequential"]["wer"]
            print(path.name, clip.name, f"{row['difference']:+.3f}", flush=True)
            rows.append(row)
    return rows


def table(rows: list[dict], clips) -> str:
    paths = list(dict.fromkeys(row["path"] for row in rows))
    lines = [
        "WER per recording and CTranslate2 path: faster-whisper sequential (beam 5) / kvscribe's "
        "default, then the default's difference (issue 55's bar: at most +0.005). English "
        "after Whisper's English normaliser, French and Spanish after its basic one.",
        "",
        "| recording | " + " | ".join(paths) + " |",
        "|---" * (len(paths) + 1) + "|",
    ]
    for clip in clips:
        cells = []
        for path in paths:
            row = next(r for r in rows if r["path"] == path and r["clip"] == clip.name)
            fw, ours = row["fw-sequential"], row["kvscribe-default"]
            cells.append(f"{fw['wer']:.3f} / {ours['wer']:.3f} ({row['difference']:+.3f})")
        lines.append(f"| {clip.name} | " + " | ".join(cells) + " |")
    lost = sum(r["kvscribe-default"]["lost_in_runs"] for r in rows)
    lost_fw = sum(r["fw-sequential"]["lost_in_runs"] for r in rows)
    worst = max(rows, key=lambda r: r["difference"])
    lines += [
        "",
        f"Reference words lost in runs of five or more, over every row: kvscribe {lost}, "
        f"faster-whisper sequential {lost_fw}. Largest difference: "
        f"{worst['difference']:+.3f} ({worst['clip']}, {worst['path']}).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", help="comma-separated clip names (default: all)")
    parser.add_argument("--oldest", default="AVX2", help="the oldest instruction set run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="longform_wer_paths")
    parser.add_argument("--made", type=Path, help="only the asterisk_*.wav recordings made here")
    args = parser.parse_args()
    known = made_clips(args.made) if args.made else CLIPS
    names = _names(args.clips, [c.name for c in known], "clips")
    clips = [c for c in known if c.name in names]
    paths = available(oldest=args.oldest)
    warm_cache(clips, list(CONFIGS), args.threads)
    rows = measure(clips, paths, args.threads)
    text = table(rows, clips)
    print(text)
    meta = {
        "device": "cpu",
        "threads": args.threads,
        "beam_size": 5,
        "cpu_vendor": cpu_vendor(),
        "paths": [p.name for p in paths],
        "clips": {c.name: {"model": c.model, "language": c.language} for c in clips},
        "units": "WER: per recording, English after Whisper's English normaliser, French and "
        "Spanish after its basic one (diacritics removed)",
    }
    results_file.write(args.out, meta, rows, text)


if __name__ == "__main__":
    main()
