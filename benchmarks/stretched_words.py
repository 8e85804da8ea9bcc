"""Words the alignment stretches: how long the default's aligned words get on real long-form
speech, on every CTranslate2 path, and which of them the stretched-word rule drops
(kvscribe.timing.timed_words.is_stretched_over_unread_speech: over 2 s and p < 0.15, the
speech under it decoded again).

    .venv/bin/python benchmarks/stretched_words.py [--made DIR ...] [--made-only]
        [--oldest AVX2] [--threads 2] [--out stretched_words]

Each recording of benchmarks/longform_peers.py (and, with --made, the asterisk_*.wav
recordings made in each DIR; --made-only: those alone) is transcribed once per path by
kvscribe's default, a whole process as a user runs it, with `-f json --word-timestamps`:
the output's words longer than LONG seconds are listed. The process runs through
`python -c` with the rule's predicate wrapped to note every word it is asked about that is
longer than LONG and whether it was dropped (what the rule drops never reaches the
output); the decisions are the rule's own.

Writes benchmarks/results/OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import results_file  # noqa: E402
from longform_peers import CLIPS, made_clips  # noqa: E402

from tests.ct2_paths import available, cpu_vendor  # noqa: E402

LONG = 1.5  # seconds: an aligned word this long is listed

# The rule's predicate, wrapped: each word longer than LONG that it judges, with its verdict,
# appended to $STRETCHED_LOG as one JSON line.
WRAPPED = f"""
import json, os, sys
from kvscribe import aligned_chunks
rule = aligned_chunks.is_stretched_over_unread_speech
def noted(word):
    dropped = rule(word)
    if word.end - word.start > {LONG}:
        with open(os.environ["STRETCHED_LOG"], "a", encoding="utf-8") as log:
            entry = [word.start, word.end, word.word, word.probability, dropped]
            log.write(json.dumps(entry) + "\\n")
    return dropped
aligned_chunks.is_stretched_over_unread_speech = noted
from kvscribe.cli.app import main
sys.argv = ["kvscribe", *sys.argv[1:]]
main()
"""


def run(clip, threads: int, environment: dict, work: Path) -> dict:
    # A folder of its own: kvscribe leaves an output that is already there alone.
    run_folder = Path(tempfile.mkdtemp(dir=work))
    log, out = run_folder / "stretched.jsonl", run_folder / "out"
    language = [] if clip.language == "en" else ["--language", clip.language]
    argv = [sys.executable, "-c", WRAPPED, str(clip.path), "--model", clip.model]
    argv += ["--threads", str(threads), *language, "-q", "-f", "json", "--word-timestamps"]
    argv += ["-o", str(out)]
    env = os.environ | environment | {"STRETCHED_LOG": str(log)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        sys.exit(f"kvscribe on {clip.name} failed:\n{done.stderr[-2000:]}")
    judged = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    unique = sorted({tuple(entry) for entry in judged})
    output = json.loads((out / f"{clip.path.stem}.json").read_text(encoding="utf-8"))
    words = [w for segment in output["segments"] for w in segment.get("words", [])]
    long_out = [
        [w["start"], w["end"], w["word"], w["probability"]]
        for w in words
        if w["end"] - w["start"] > LONG
    ]
    return {
        "dropped": [entry[:4] for entry in unique if entry[4]],
        "judged_long": [entry[:4] for entry in unique],
        "long_in_output": long_out,
        "longest_in_output": max((w["end"] - w["start"] for w in words), default=0.0),
    }


def table(rows: list[dict]) -> str:
    lines = [
        f"Words aligned longer than {LONG:g} s by kvscribe's default (`-f json "
        "--word-timestamps`), per recording and CTranslate2 path: how many the output holds, "
        "and those the stretched-word rule dropped (over 2 s and p < 0.15; word, seconds, p).",
        "",
        "| recording | path | longest word in the output (s) | longer than 1.5 s in the output "
        "| dropped by the rule |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        dropped = "; ".join(
            f'"{w.strip()}" {end - start:.1f} s, p {p:.2f}' for start, end, w, p in row["dropped"]
        )
        lines.append(
            f"| {row['clip']} | {row['path']} | {row['longest_in_output']:.2f} "
            f"| {len(row['long_in_output'])} | {dropped or '-'} |"
        )
    longest = max(r["longest_in_output"] for r in rows)
    dropped = sum(len(r["dropped"]) for r in rows)
    lines += [
        "",
        f"{len(rows)} runs: {dropped} word(s) dropped by the rule; the longest word in any "
        f"output {longest:.2f} s.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--made", type=Path, action="append", default=[])
    parser.add_argument("--made-only", action="store_true", help="not the eval's recordings")
    parser.add_argument("--oldest", default="AVX2", help="the oldest instruction set run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="stretched_words")
    args = parser.parse_args()
    clips = ([] if args.made_only else list(CLIPS)) + [
        clip for folder in args.made for clip in made_clips(folder)
    ]
    paths = available(oldest=args.oldest)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for path in paths:
            for clip in clips:
                row = {"path": path.name, "clip": clip.name}
                row |= run(clip, args.threads, path.environment(), Path(work))
                print(path.name, clip.name, len(row["long_in_output"]), row["dropped"], flush=True)
                rows.append(row)
    text = table(rows)
    print(text)
    meta = {
        "device": "cpu",
        "threads": args.threads,
        "cpu_vendor": cpu_vendor(),
        "paths": [p.name for p in paths],
        "clips": {c.name: {"model": c.model, "language": c.language} for c in clips},
        "units": "seconds: aligned word spans; p: the decoder's word probability",
    }
    results_file.write(args.out, meta, rows, text)


if __name__ == "__main__":
    main()
