"""whisper-cli on a busy machine: unpatched, its threads spin at ggml's barriers, so with
other work on the cores more threads cost many times the time and CPU of fewer; kvscribe's
build yields the core there (barrier-yield.patch).

    .venv/bin/python benchmarks/whispercpp_busy.py [--repeat N] [--before WHISPER_CLI] [--out NAME]

whisper-cli (kvscribe's build, `kvscribe setup whisper-cpp`) on samples/jfk.wav with
tiny.en's ggml file, `-t 1` and `-t <cores>`, alone and beside one busy-looping process
per core (as the test suite's other workers, or any other work, would be). The settings
alternate, run after run; each run's wall seconds and its CPU seconds (user + system,
as this process counts its reaped children); with --before, an earlier build's too,
interleaved. Writes benchmarks/results/NAME.json and .md (NAME: whispercpp_busy unless --out says).
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


def _settings(builds: dict[str, Path], cores: int) -> list[tuple[str, int, int]]:
    """(build, threads, busy processes): -t 1 and -t <cores>, alone and beside `cores`
    spinners, for each build."""
    return [
        (build, threads, busy)
        for busy in (0, cores)
        for threads in sorted({1, cores})
        for build in builds
    ]


def main() -> None:
    parser = results_file.arguments(__doc__, repeat=3)
    parser.add_argument(
        "--before",
        type=Path,
        metavar="WHISPER_CLI",
        help="also time this whisper-cli (an earlier build), interleaved with kvscribe's",
    )
    parser.add_argument("--out", default="whispercpp_busy", help="results name")
    args = parser.parse_args()
    builds = {"kvscribe's build": binary.find().path}
    if args.before:
        builds["before"] = args.before
    model = resolve("tiny.en", ("ggml",)).path
    cores = len(os.sched_getaffinity(0))
    settings = _settings(builds, cores)
    runs: dict[tuple[str, int, int], list[tuple[float, float]]] = {s: [] for s in settings}
    for cli in builds.values():
        _run(cli, model, cores)  # warm the page cache
    for _ in range(args.repeat):
        for build, threads, busy in settings:
            runs[(build, threads, busy)].append(_measure(builds[build], model, threads, busy))
    rows = [
        _row(build, threads, busy, measured) for (build, threads, busy), measured in runs.items()
    ]
    for row in rows:
        print(row, flush=True)
    meta = {"device": "cpu", "clip": CLIP.name, "model": "tiny.en (ggml)", "repeat": args.repeat}
    meta["whisper_cli"] = {build: str(cli) for build, cli in builds.items()}
    table = [
        "# whisper-cli beside other work",
        "",
        f"`whisper-cli -m tiny.en -f {CLIP.name} -t N -np`, whole processes, {args.repeat} runs "
        f"of each setting, alternating; busy: {cores} processes looping in Python on the "
        f"{cores} cores meanwhile. CPU: whisper-cli's own user + system seconds. Builds: "
        + "; ".join(f"{build}: `{cli}`" for build, cli in builds.items()),
        "",
        "| build | -t | busy processes | median wall s | median CPU s | runs wall s | runs CPU s |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r['build']} | {r['threads']} | {r['busy_processes']} | {r['wall_median_s']:.2f} | "
            f"{r['cpu_median_s']:.2f} | {r['wall_s']} | {r['cpu_s']} |"
            for r in rows
        ),
    ]
    results_file.write(args.out, meta, rows, "\n".join(table))
    print("\n".join(table))


def _row(build: str, threads: int, busy: int, measured: list[tuple[float, float]]) -> dict:
    walls, cpus = [w for w, _ in measured], [c for _, c in measured]
    return {
        "build": build,
        "threads": threads,
        "busy_processes": busy,
        "wall_median_s": round(statistics.median(walls), 2),
        "cpu_median_s": round(statistics.median(cpus), 2),
        "wall_s": [round(w, 2) for w in walls],
        "cpu_s": [round(c, 2) for c in cpus],
    }


if __name__ == "__main__":
    main()
