"""`--cluster` vs `--jobs 2` on this machine: the 40-file folder of batch_folders.py (the
eval clips copied to 35 nested paths, plus 5 bad files), `--jobs 2` as a user runs it,
then `--cluster auto` on a local two-node Ray cluster (1 CPU per node, token auth) that
runs with its driver in loopback-only network and PID namespaces (tests/cluster_local.py;
as root). Each way runs twice; outputs, exit codes and manifest statuses are compared.

    .venv/bin/python benchmarks/cluster_vs_jobs.py [CLIPS_DIR]

Writes benchmarks/results/cluster_vs_jobs.json and .md: wall seconds of each whole
`kvscribe` process (cluster start-up apart), files per minute, whether outputs match.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import corpus
import results_file
from batch_folders import BAD, build_tree, outputs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.cluster_local import namespace_command  # noqa: E402

KVSCRIBE = Path(sys.executable).parent / "kvscribe"
COMMON = ["--recursive", "-f", "srt,txt", "-p", "auto", "-q"]
RUNS = 2


def timed(argv: list) -> dict:
    started = time.perf_counter()
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    return {
        "seconds": time.perf_counter() - started,
        "exit": done.returncode,
        "stderr": done.stderr,
    }


def statuses(out: Path) -> dict:
    lines = (out / ".kvscribe" / "manifest.jsonl").read_text().splitlines()
    return {r["input"]: (r["status"], r["exit_code"]) for r in map(json.loads, lines)}


def inner(tree: str, work: str, result: str) -> None:
    """Inside the namespaces, with the cluster up: RUNS timed `--cluster auto` runs."""
    runs = [
        timed([KVSCRIBE, tree, "-o", f"{work}/cluster-{i}", *COMMON, "--cluster", "auto"])
        for i in range(RUNS)
    ]
    Path(result).write_text(json.dumps(runs))


def cluster_runs(tree: Path, work: Path) -> tuple[list[dict], float]:
    result = work / "cluster.json"
    argv = [sys.executable, ROOT / "tests" / "cluster_local.py", "--"]
    argv += [sys.executable, Path(__file__).resolve(), "--inner", tree, work, result]
    done = subprocess.run(namespace_command([str(a) for a in argv]), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"cluster run failed: {done.stderr[-2000:]}")
    start = float(re.search(r"cluster started in ([\d.]+) s", done.stderr)[1])
    return json.loads(result.read_text()), start


def main() -> None:
    parser = argparse.ArgumentParser()
    default = corpus.CLIPS
    parser.add_argument("clips", nargs="?", type=Path, default=default)
    parser.add_argument("--inner", nargs=3, metavar=("TREE", "WORK", "RESULT"))
    args = parser.parse_args()
    if args.inner:
        inner(*args.inner)
        return
    clips = sorted(args.clips.glob("*.wav"))
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        tree = work / "recordings"
        good = build_tree(clips, tree)
        files = good + len(BAD)
        jobs = [
            timed([KVSCRIBE, tree, "-o", work / f"jobs-{i}", *COMMON, "--jobs", 2])
            for i in range(RUNS)
        ]
        cluster, start = cluster_runs(tree, work)
        reference = outputs(work / "jobs-0")
        rows = []
        for way, runs in (("--jobs 2", jobs), ("--cluster auto", cluster)):
            prefix = "jobs" if way == "--jobs 2" else "cluster"
            for i, run in enumerate(runs):
                out = work / f"{prefix}-{i}"
                rows.append(
                    {
                        "run": f"{way} #{i + 1}",
                        "exit": run["exit"],
                        "seconds": run["seconds"],
                        "files_per_minute": 60 * files / run["seconds"],
                        "outputs_identical_to_jobs_2": outputs(out) == reference,
                        "manifest_statuses_equal": statuses(out) == statuses(work / "jobs-0"),
                    }
                )
                print(rows[-1])
    table = _table(rows, files, good, start)
    print("\n" + table)
    meta = {
        "device": "cpu",
        "backend": "ctranslate2 (kvscribe's default)",
        "profile": "auto (cpu-laptop on this machine)",
        "model": "tiny.en (kvscribe's default)",
        "clips_dir": str(args.clips),
        "inputs": {"good": good, "bad": sorted(BAD)},
        "cluster": "2 nodes x 1 CPU (`ray start --head --num-cpus 1` + one `ray start "
        "--address`), token auth, loopback only, same machine; Ray 2.60.0",
        "cluster_start_seconds": start,
        "timing": "wall clock of each whole `kvscribe` process; cluster start-up apart",
    }
    results_file.write("cluster_vs_jobs", meta, rows, table)


def _table(rows: list[dict], files: int, good: int, start: float) -> str:
    lines = [
        f"{files} files ({good} good: the eval clips in nested folders, {files - good} bad), "
        "`-p auto -f srt,txt`; the cluster: 2 nodes of 1 CPU on this machine",
        "",
        "| run | wall (s) | files/min | exit | outputs = `--jobs 2` | manifest statuses |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| `{row['run']}` | {row['seconds']:.1f} | {row['files_per_minute']:.0f} | "
            f"{row['exit']} | {row['outputs_identical_to_jobs_2']} | "
            f"{'same' if row['manifest_statuses_equal'] else 'differ'} |"
        )
    best = {
        way: min(r["seconds"] for r in rows if r["run"].startswith(way))
        for way in ("--jobs 2", "--cluster")
    }
    ratio = best["--jobs 2"] / best["--cluster"] - 1
    lines += [
        "",
        f"Best of {RUNS}: `--cluster` {100 * ratio:+.0f} % throughput vs `--jobs 2`; "
        f"starting the two-node cluster (`ray start` x 2) took {start:.1f} s more, once.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
