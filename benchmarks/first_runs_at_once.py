"""First runs at once: several `kvscribe` processes started together on an empty cache, as a
shell script over a folder (`xargs -P`) does on a new machine.

    .venv/bin/python benchmarks/first_runs_at_once.py [--processes N] [--repeat R] [--out NAME]

A first run writes what it makes of the model into the cache once (its int8 copy, the
onnxruntime encoder graph) and times the two encoders on this machine to choose one. Each
round: one `kvscribe samples/jfk.wav` alone on an empty cache, then N of them started at
once on another empty cache. Per round: wall seconds until the last ended, CPU seconds
summed over the processes (user + system, from wait4), how many processes reported their
own encoder timing (the stats' encoder line, which names the figures it chose by), and
whether every transcript was the same. Writes benchmarks/results/NAME.json and .md; the
meta names the commit the code was at.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results_file  # noqa: E402

KVSCRIBE = Path(sys.executable).parent / "kvscribe"
SAMPLE = ROOT / "samples" / "jfk.wav"


def _started(cache: Path, stats: Path) -> subprocess.Popen:
    environment = os.environ | {"KVSCRIBE_CACHE_DIR": str(cache)}
    command = [str(KVSCRIBE), str(SAMPLE), "-f", "txt", "-q", "--stats-json", str(stats)]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=environment, text=True
    )


def _round(processes: int) -> dict:
    """`processes` first runs started together on one empty cache."""
    with tempfile.TemporaryDirectory(prefix="first-runs-") as folder:
        cache, started = Path(folder) / "cache", time.perf_counter()
        running = [_started(cache, Path(folder) / f"stats{i}.json") for i in range(processes)]
        cpu, texts = 0.0, []
        for process in running:
            texts.append(process.stdout.read())
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            cpu += usage.ru_utime + usage.ru_stime
        wall = time.perf_counter() - started
        failed = [p.returncode for p in running if p.returncode != 0]
        if failed:
            raise SystemExit(f"kvscribe exited {failed}")
        encoders = [
            json.loads((Path(folder) / f"stats{i}.json").read_text())["settings"]["encoder"]
            for i in range(processes)
        ]
    return {
        "processes": processes,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "encoder_timings": len(set(encoders)),
        "same_text": len(set(texts)) == 1,
    }


def main() -> None:
    parser = results_file.arguments(__doc__, repeat=2)
    parser.add_argument("--processes", type=int, default=3, metavar="N")
    parser.add_argument("--out", default="first_runs_at_once")
    args = parser.parse_args()
    rows = []
    for repeat in range(args.repeat):
        for processes in (1, args.processes):
            row = {"round": repeat + 1, **_round(processes)}
            print(row, flush=True)
            rows.append(row)
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    meta = {"code": commit, "units": "seconds: wall clock and CPU (user + system)"}
    results_file.write(args.out, meta, rows, _markdown(rows, commit))


def _markdown(rows: list[dict], commit: str) -> str:
    lines = [
        f"# First runs at once on an empty cache (the code at `{commit}`)",
        "",
        "`kvscribe samples/jfk.wav -f txt` started alone, then several together, each round on "
        "an empty cache. Encoder timings: how many different encoder lines the processes' "
        "stats reported (1: one process timed the encoders and the others read its record).",
        "",
        "| round | processes | wall s | CPU s summed | encoder timings | same text |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['round']} | {row['processes']} | {row['wall_s']:.2f} | {row['cpu_s']:.2f} "
            f"| {row['encoder_timings']} | {'yes' if row['same_text'] else 'no'} |"
        )
    for processes in sorted({row["processes"] for row in rows}):
        same = [row for row in rows if row["processes"] == processes]
        lines.append("")
        lines.append(
            f"{processes} at once, median over rounds: "
            f"{statistics.median(r['wall_s'] for r in same):.2f} s wall, "
            f"{statistics.median(r['cpu_s'] for r in same):.2f} CPU s."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
