"""Behaviour unchanged by a restructure: every backend's outputs before and after, compared.

    .venv/bin/python benchmarks/same_outputs.py snapshot DIR   # run every backend into DIR
    .venv/bin/python benchmarks/same_outputs.py compare BEFORE AFTER

`snapshot` runs the `kvscribe` command (whole processes, as a user does) with each backend
on the eval clips and one realform recording, writing JSON (segments, words, tokens) and
`--stats-json`. `compare` wants the JSON outputs byte for byte identical and the stats
identical apart from times and memory (keys named below); it prints each difference and
exits 1 if there is one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def _differences(before: Path, after: Path) -> list[str]:
    problems = []
    for backend in BACKENDS:
        old, new = before / backend, after / backend
        names = sorted(p.relative_to(old) for p in old.rglob("*.json"))
        if names != sorted(p.relative_to(new) for p in new.rglob("*.json")):
            problems.append(f"{backend}: not the same output files")
        problems += [
            f"{backend}/{name}: outputs differ"
            for name in names
            if (new / name).exists() and (old / name).read_bytes() != (new / name).read_bytes()
        ]
        stats = [_steady(json.loads(Path(f"{f}.stats.json").read_text())) for f in (old, new)]
        if stats[0] != stats[1]:
            problems.append(f"{backend}: stats differ beyond times and memory")
    return problems


def main() -> None:
    verb, *folders = sys.argv[1:]
    if verb == "snapshot":
        snapshot(Path(folders[0]))
        return
    problems = _differences(Path(folders[0]), Path(folders[1]))
    for problem in problems:
        print(problem)
    print(f"{len(problems)} difference(s) over {', '.join(BACKENDS)}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
