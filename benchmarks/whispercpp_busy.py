"""whisper-cli on a busy machine: its threads spin at ggml's barriers, so with other work on
the cores more threads can cost many times the time and CPU of fewer.

    .venv/bin/python benchmarks/whispercpp_busy.py [--repeat N]

whisper-cli (kvscribe's build, `kvscribe setup whisper-cpp`) on samples/jfk.wav with
tiny.en's ggml file, `-t 1` and `-t <cores>`, alone and beside one busy-looping process
per core (as the test suite's other workers, or any other work, would be). The settings
alternate, run after run; each run's wall seconds and its CPU seconds (user + system,
as this process counts its reaped children). Writes benchmarks/results/whispercpp_busy.json and .md.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results_file  # noqa: E402

from kvscribe.backends.whispercpp import binary  # noqa: E402
from kvscribe.machine.capacity import process_cpu_seconds  # noqa: E402
from kvscribe.models import resolve  # noqa: E402

CLIP = ROOT / "samples" / "jfk.wav"
_SPIN = "while True: pass"


def _run(cli: Path, model: Path, threads: int) -> tuple[float, float]:
    """Wall and CPU seconds of one whisper-cli run (the CPU its reaped process spent: the
    spinners beside it are reaped only after it)."""
    argv = [str(cli), "-m", str(model), "-f", str(CLIP), "-t", str(threads), "-np"]
    cpu, started = process_cpu_seconds(), time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - started, process_cpu_seconds() - cpu
    if done.returncode:
        raise SystemExit(f"whisper-cli exited {done.returncode}: {' '.join(argv)}")
    return wall, cpu


def _measure(cli: Path, model: Path, threads: int, busy: int) -> tuple[float, float]:
    spinners = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(busy)]
    try:
        time.sleep(0.3 if busy else 0)  # the spinners running before whisper-cli starts
        return _run(cli, model, threads)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def main() -> None:
    repeat = results_file.arguments(__doc__, repeat=3).parse_args().repeat
    cli, model = binary.find().path, resolve("tiny.en", ("ggml",)).path
    cores = len(os.sched_getaffinity(0))
    settings = [(threads, busy) for busy in (0, cores) for threads in sorted({1, cores})]
    runs: dict[tuple[int, int], list[tuple[float, float]]] = {s: [] for s in settings}
    _run(cli, model, cores)  # warm the page cache
    for _ in range(repeat):
        for threads, busy in settings:
            runs[(threads, busy)].append(_measure(cli, model, threads, busy))
    rows = []
    for (threads, busy), measured in runs.items():
        walls, cpus = [w for w, _ in measured], [c for _, c in measured]
        rows.append(
            {
                "threads": threads,
                "busy_processes": busy,
                "wall_median_s": round(statistics.median(walls), 2),
                "cpu_median_s": round(statistics.median(cpus), 2),
                "wall_s": [round(w, 2) for w in walls],
                "cpu_s": [round(c, 2) for c in cpus],
            }
        )
        print(rows[-1], flush=True)
    meta = {"device": "cpu", "clip": CLIP.name, "model": "tiny.en (ggml)", "repeat": repeat}
    meta["whisper_cli"] = str(cli)
    table = [
        "# whisper-cli beside other work",
        "",
        f"`whisper-cli -m tiny.en -f {CLIP.name} -t N -np`, whole processes, {repeat} runs of "
        f"each setting, alternating; busy: {cores} processes looping in Python on the "
        f"{cores} cores meanwhile. CPU: whisper-cli's own user + system seconds.",
        "",
        "| -t | busy processes | median wall s | median CPU s | runs wall s | runs CPU s |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['threads']} | {r['busy_processes']} | {r['wall_median_s']:.2f} | "
            f"{r['cpu_median_s']:.2f} | {r['wall_s']} | {r['cpu_s']} |"
            for r in rows
        ),
    ]
    results_file.write("whispercpp_busy", meta, rows, "\n".join(table))
    print("\n".join(table))


if __name__ == "__main__":
    main()
