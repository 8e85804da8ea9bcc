"""Behaviour unchanged by a restructure: every backend's outputs before and after, compared.

    .venv/bin/python benchmarks/same_outputs.py snapshot DIR   # run every backend into DIR
    .venv/bin/python benchmarks/same_outputs.py compare BEFORE AFTER

`snapshot` runs the `kvscribe` command (whole processes, as a user does) with each backend
on the eval clips and one realform recording, writing JSON (segments, words, tokens) and
`--stats-json`. `compare` wants the JSON outputs byte for byte identical and the stats
identical apart from times and memory (keys named below); it prints each difference, writes
benchmarks/results/same_outputs.json and .md (name the snapshot folders after the commits
they were taken at), and exits 1 if there is a difference.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402

KVSCRIBE = Path(sys.executable).parent / "kvscribe"
BACKENDS = ("ctranslate2", "transformers", "onnx", "whispercpp")
INPUTS = (ROOT / "eval" / "clips", ROOT / "eval" / "realform" / "asterisk_en_ivr_dev.wav")
# Figures of time and of memory held by the process: they change from run to run.
VARYING = re.compile(r"seconds|(^|_)ms(_|$)|timings|real_time_factor|rss|memory_samples")


def snapshot(folder: Path) -> None:
    for backend in BACKENDS:
        out = folder / backend
        argv = [str(KVSCRIBE), *map(str, INPUTS), "-b", backend, "-o", str(out), "-f", "json"]
        argv += ["--word-timestamps", "--jobs", "1", "-q", "--stats-json", f"{out}.stats.json"]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            sys.exit(f"{backend}: exit {done.returncode}\n{done.stderr[-2000:]}")
        print(f"{backend}: {len(list(out.rglob('*.json')))} JSON outputs", flush=True)


def _steady(value):
    """The stats without the figures that vary from run to run."""
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if not VARYING.search(k)}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def _compared(before: Path, after: Path, backend: str) -> dict:
    """One backend's outputs in the two snapshots: which differ, and whether the stats do."""
    old, new = before / backend, after / backend
    names = sorted(p.relative_to(old) for p in old.rglob("*.json"))
    same_files = names == sorted(p.relative_to(new) for p in new.rglob("*.json"))
    differing = [
        str(name)
        for name in names
        if not (new / name).exists() or (old / name).read_bytes() != (new / name).read_bytes()
    ]
    stats = [_steady(json.loads(Path(f"{f}.stats.json").read_text())) for f in (old, new)]
    return {
        "backend": backend,
        "outputs": len(names),
        "same_files": same_files,
        "differing": differing,
        "stats_equal": stats[0] == stats[1],
    }


def _problems(row: dict) -> list[str]:
    backend = row["backend"]
    problems = [] if row["same_files"] else [f"{backend}: not the same output files"]
    problems += [f"{backend}/{name}: outputs differ" for name in row["differing"]]
    if not row["stats_equal"]:
        problems.append(f"{backend}: stats differ beyond times and memory")
    return problems


def _write(before: Path, after: Path, rows: list[dict]) -> None:
    table = [
        f"# Every backend's outputs: {before.name} against {after.name}",
        "",
        "`kvscribe` with each backend, `-f json --word-timestamps --jobs 1`, on every clip of "
        "`eval/clips/` and on `eval/realform/asterisk_en_ivr_dev.wav`.",
        "",
        "| backend | JSON outputs | byte-identical | stats equal (apart from times, memory) |",
        "|---|---|---|---|",
        *(
            f"| {r['backend']} | {r['outputs']} | {r['outputs'] - len(r['differing'])} | "
            f"{'yes' if r['stats_equal'] else 'no'} |"
            for r in rows
        ),
    ]
    meta = {"before": before.name, "after": after.name}
    results_file.write("same_outputs", meta, rows, "\n".join(table))


def _arguments() -> argparse.Namespace:
    parser = results_file.arguments(__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="{snapshot,compare}")
    taking = verbs.add_parser("snapshot", help="run every backend into DIR")
    taking.add_argument("folder", type=Path, metavar="DIR")
    comparing = verbs.add_parser("compare", help="compare two snapshots, write the results")
    comparing.add_argument("before", type=Path, metavar="BEFORE")
    comparing.add_argument("after", type=Path, metavar="AFTER")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.verb == "snapshot":
        snapshot(args.folder)
        return
    before, after = args.before, args.after
    rows = [_compared(before, after, backend) for backend in BACKENDS]
    _write(before, after, rows)
    problems = [problem for row in rows for problem in _problems(row)]
    for problem in problems:
        print(problem)
    print(f"{len(problems)} difference(s) over {', '.join(BACKENDS)}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
