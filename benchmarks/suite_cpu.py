"""Where the suite's CPU goes: the whole suite (`.venv/bin/pytest`, its own workers) with
tests/cpu_log.py on, then each module's CPU seconds and the tests that cost most.

    .venv/bin/python benchmarks/suite_cpu.py [--out suite_cpu] [--write-order] [PYTEST ARGS...]

The suite is CPU-bound on 2 cores, so what it costs is CPU seconds, not a test's wall
time (a test waiting for a core looks as slow as one using it). A module fixture's cost
falls on the tests that set it up and tear it down, so modules are the unit to compare.
Writes benchmarks/results/NAME.json and .md (NAME: suite_cpu unless --out says); with
--write-order, also tests/module_order.txt, the order the workers take the modules in
(tests/module_order.py: longest summed wall first). Rank from a whole-suite run only: a
run of some modules would drop the others to the end. With --from-log FILE, the figures of
a run already made with KVSCRIBE_TEST_CPU_LOG=FILE (wall: from its first test to its last).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results_file  # noqa: E402

from tests.module_order import write_ranking  # noqa: E402

SHOWN = 25  # modules and tests in each table


def by_module(lines: list[dict]) -> list[dict]:
    """Each module's tests, CPU and wall seconds summed, costliest first."""
    modules: dict[str, dict] = defaultdict(
        lambda: {"tests": 0, "cpu": 0.0, "children_cpu": 0.0, "wall": 0.0}
    )
    for line in lines:
        module = modules[line["test"].split("::")[0]]
        module["tests"] += 1
        module["cpu"] += line["cpu"]
        module["children_cpu"] += line.get("children_cpu", 0.0)  # older logs: not split
        module["wall"] += line["wall"]
    rows = [{"module": name, **sums} for name, sums in modules.items()]
    return sorted(rows, key=lambda row: row["cpu"], reverse=True)


def timeline(lines: list[dict]) -> list[dict]:
    """Each worker's span (seconds from the run's first test): when its last test ended and
    how long its tests ran; lines without a start (older logs) give none."""
    timed = [line for line in lines if "start" in line]
    if not timed:
        return []
    origin = min(line["start"] for line in timed)
    workers: dict[str, dict] = defaultdict(lambda: {"ends": 0.0, "busy": 0.0, "cpu": 0.0})
    for line in timed:
        worker = workers[line["worker"]]
        worker["ends"] = max(worker["ends"], line["start"] + line["wall"] - origin)
        worker["busy"] += line["wall"]
        worker["cpu"] += line["cpu"]
    rows = [
        {"worker": name, **{k: round(v, 1) for k, v in w.items()}} for name, w in workers.items()
    ]
    return sorted(rows, key=lambda row: row["ends"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="suite_cpu")
    parser.add_argument("--write-order", action="store_true", help="rewrite tests/module_order.txt")
    parser.add_argument("--from-log", type=Path, help="a KVSCRIBE_TEST_CPU_LOG file, not a new run")
    args, pytest_args = parser.parse_known_args()
    if args.from_log:
        lines, exit_code, wall = _read(args.from_log), None, None
    else:
        lines, exit_code, wall = _run(pytest_args)
    modules, workers = by_module(lines), timeline(lines)
    cpu = sum(line["cpu"] for line in lines)
    tests = sorted(lines, key=lambda line: line["cpu"], reverse=True)
    if wall is None and workers:
        wall = workers[-1]["ends"]  # the log's own span: from the first test to the last
    wall = round(wall, 1) if wall is not None else None  # None: an old log, no start times
    meta = {"pytest_exit": exit_code, "wall_seconds": wall, "tests": len(lines)}
    meta["cpu_seconds"] = round(cpu, 1)
    if all("children_cpu" in line for line in lines):
        meta["children_cpu_seconds"] = round(sum(line["children_cpu"] for line in lines), 1)
    meta["source"] = (
        f"a run's log ({args.from_log.name}): `.venv/bin/pytest -q` with KVSCRIBE_TEST_CPU_LOG set"
        if args.from_log
        else "this run"
    )
    tables = _markdown(meta, modules, tests[:SHOWN]) + _workers_markdown(workers)
    results_file.write(args.out, {**meta, "workers": workers}, modules, tables)
    if args.write_order and exit_code in (0, None):  # None: a log's run, its exit unknown
        write_ranking({row["module"]: row["wall"] for row in modules})
    sys.exit(exit_code or 0)


def _run(pytest_args: list[str]) -> tuple[list[dict], int, float]:
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "cpu.jsonl"
        env = {**os.environ, "KVSCRIBE_TEST_CPU_LOG": str(log)}
        started = time.perf_counter()
        done = subprocess.run([str(ROOT / ".venv/bin/pytest"), "-q", *pytest_args], env=env)
        return _read(log), done.returncode, time.perf_counter() - started


def _read(log: Path) -> list[dict]:
    return [json.loads(text) for text in log.read_text().splitlines()]


def _workers_markdown(workers: list[dict]) -> str:
    if not workers:
        return ""
    alone = workers[-1]["ends"] - workers[-2]["ends"] if len(workers) > 1 else 0.0
    lines = ["", "", "## The workers", ""]
    lines += [f"The last worker ran alone for the last {alone:.0f} s of the tests.", ""]
    lines += [
        "| worker | last test ended (s) | its tests' wall s | their CPU s |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {w['worker']} | {w['ends']:.1f} | {w['busy']:.1f} | {w['cpu']:.1f} |" for w in workers
    ]
    return "\n".join(lines)


def _markdown(meta: dict, modules: list[dict], tests: list[dict]) -> str:
    lines = [
        "# Where the suite's CPU goes",
        "",
        f"The whole suite ({meta['source']}): {meta['tests']} tests, pytest exit "
        f"{'not in the log' if meta['pytest_exit'] is None else meta['pytest_exit']}, "
        f"{'unknown' if meta['wall_seconds'] is None else round(meta['wall_seconds'])} s wall, "
        f"{meta['cpu_seconds']:.0f} CPU s summed over the tests (each worker's own and its "
        "reaped children's, user + system)" + _children_said(meta) + ".",
        "",
        f"## The {SHOWN} costliest modules",
        "",
        "| module | tests | CPU s | share | of which in child processes | wall s summed |",
        "|---|---|---|---|---|---|",
    ]
    split = "children_cpu_seconds" in meta
    for row in modules[:SHOWN]:
        share = 100 * row["cpu"] / meta["cpu_seconds"]
        children = f"{row['children_cpu']:.1f}" if split else "not in the log"
        lines.append(
            f"| {row['module']} | {row['tests']} | {row['cpu']:.1f} | {share:.1f} % "
            f"| {children} | {row['wall']:.1f} |"
        )
    lines += ["", f"## The {SHOWN} costliest tests", ""]
    lines += ["| test | CPU s | wall s |", "|---|---|---|"]
    lines += [f"| {t['test']} | {t['cpu']:.1f} | {t['wall']:.1f} |" for t in tests]
    return "\n".join(lines)


def _children_said(meta: dict) -> str:
    """The processes the tests started (`kvscribe`, whisper-cli, servers, Ray), apart."""
    if "children_cpu_seconds" not in meta:
        return ""
    children = meta["children_cpu_seconds"]
    return (
        f"; {children:.0f} of them in the processes the tests started and reaped, "
        f"{meta['cpu_seconds'] - children:.0f} in the workers themselves"
    )


if __name__ == "__main__":
    main()
