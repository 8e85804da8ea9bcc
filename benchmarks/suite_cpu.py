"""Where the suite's CPU goes: the whole suite (`.venv/bin/pytest`, its own workers) with
tests/cpu_log.py on, then each module's CPU seconds and the tests that cost most.

    .venv/bin/python benchmarks/suite_cpu.py [--out suite_cpu] [PYTEST ARGS...]

The suite is CPU-bound on 2 cores, so what it costs is CPU seconds, not a test's wall
time (a test waiting for a core looks as slow as one using it). A module fixture's cost
falls on the tests that set it up and tear it down, so modules are the unit to compare.
Writes benchmarks/results/NAME.json and .md (NAME: suite_cpu unless --out says).
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

SHOWN = 25  # modules and tests in each table


def by_module(lines: list[dict]) -> list[dict]:
    """Each module's tests, CPU and wall seconds summed, costliest first."""
    modules: dict[str, dict] = defaultdict(lambda: {"tests": 0, "cpu": 0.0, "wall": 0.0})
    for line in lines:
        module = modules[line["test"].split("::")[0]]
        module["tests"] += 1
        module["cpu"] += line["cpu"]
        module["wall"] += line["wall"]
    rows = [{"module": name, **sums} for name, sums in modules.items()]
    return sorted(rows, key=lambda row: row["cpu"], reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="suite_cpu")
    args, pytest_args = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "cpu.jsonl"
        env = {**os.environ, "KVSCRIBE_TEST_CPU_LOG": str(log)}
        started = time.perf_counter()
        done = subprocess.run([str(ROOT / ".venv/bin/pytest"), "-q", *pytest_args], env=env)
        wall = time.perf_counter() - started
        lines = [json.loads(text) for text in log.read_text().splitlines()]
    modules = by_module(lines)
    cpu = sum(line["cpu"] for line in lines)
    tests = sorted(lines, key=lambda line: line["cpu"], reverse=True)
    meta = {"pytest_exit": done.returncode, "wall_seconds": round(wall, 1), "tests": len(lines)}
    meta["cpu_seconds"] = round(cpu, 1)
    results_file.write(args.out, meta, modules, _markdown(meta, modules, tests[:SHOWN]))
    sys.exit(done.returncode)


def _markdown(meta: dict, modules: list[dict], tests: list[dict]) -> str:
    lines = [
        "# Where the suite's CPU goes",
        "",
        f"The whole suite: {meta['tests']} tests, pytest exit {meta['pytest_exit']}, "
        f"{meta['wall_seconds']:.0f} s wall, {meta['cpu_seconds']:.0f} CPU s summed over "
        "the tests (each worker's own and its reaped children's, user + system).",
        "",
        f"## The {SHOWN} costliest modules",
        "",
        "| module | tests | CPU s | share | wall s summed |",
        "|---|---|---|---|---|",
    ]
    for row in modules[:SHOWN]:
        share = 100 * row["cpu"] / meta["cpu_seconds"]
        lines.append(
            f"| {row['module']} | {row['tests']} | {row['cpu']:.1f} | {share:.1f} % "
            f"| {row['wall']:.1f} |"
        )
    lines += ["", f"## The {SHOWN} costliest tests", ""]
    lines += ["| test | CPU s | wall s |", "|---|---|---|"]
    lines += [f"| {t['test']} | {t['cpu']:.1f} | {t['wall']:.1f} |" for t in tests]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
