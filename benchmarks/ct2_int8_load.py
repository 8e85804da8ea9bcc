"""Loading a CTranslate2 Whisper model in int8 on a CPU: from its float16 file (CTranslate2
quantizes every weight at the load) against from kvscribe's int8 copy of it
(kvscribe/models/ct2_int8.py, which the ctranslate2 backend loads on a CPU in int8).

    .venv/bin/python benchmarks/ct2_int8_load.py [--models tiny.en,base] [--repeat 7]
        [--threads 2] [--out ct2_int8_load]

Per model (a model that cannot be found offline is left out): the copy written once into a
temporary folder (its seconds and bytes), then the load timed in fresh processes, the two
files in turn (`ctranslate2.models.Whisper(path, device="cpu", compute_type="int8",
inter_threads=THREADS, intra_threads=1)`, as the backend loads its single-thread
replicas), each process timing its own load (time.perf_counter around the constructor:
the interpreter's start and imports are not in it). Medians of --repeat loads each.
Writes benchmarks/results/OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import results_file

from kvscribe.errors import KvscribeError
from kvscribe.models import ct2_int8, store

_LOAD = (
    "import sys, time, ctranslate2\n"
    "started = time.perf_counter()\n"
    "ctranslate2.models.Whisper(sys.argv[1], device='cpu', compute_type='int8',"
    " inter_threads=int(sys.argv[2]), intra_threads=1)\n"
    "print(time.perf_counter() - started)\n"
)


def load_seconds(path: Path, threads: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _LOAD, str(path), str(threads)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip())


def measure(name: str, repeat: int, threads: int, folder: Path) -> dict | None:
    try:
        model = store.resolve(name, ("ctranslate2",))
    except KvscribeError as exc:
        print(f"{name}: left out ({exc.one_line()})", file=sys.stderr)
        return None
    started = time.perf_counter()
    copy = ct2_int8.write(model.path, folder / f"{name}-int8")
    write_seconds = time.perf_counter() - started
    float_loads, int8_loads = [], []
    for _ in range(repeat):
        float_loads.append(load_seconds(model.path, threads))
        int8_loads.append(load_seconds(copy, threads))
    row = {
        "model": name,
        "float_file_mb": (model.path / "model.bin").stat().st_size / 1e6,
        "int8_file_mb": (copy / "model.bin").stat().st_size / 1e6,
        "write_seconds": write_seconds,
        "float_loads": float_loads,
        "int8_loads": int8_loads,
        "float_median": statistics.median(float_loads),
        "int8_median": statistics.median(int8_loads),
    }
    print(name, f"{row['float_median']:.3f} s -> {row['int8_median']:.3f} s", file=sys.stderr)
    return row


def table(rows: list[dict], repeat: int, threads: int) -> str:
    lines = [
        f"CTranslate2 loading each model in int8 on {threads} single-thread replicas, in fresh "
        f"processes, the two files in turn; medians of {repeat} loads (seconds), model.bin "
        "sizes in MB (10^6 bytes).",
        "",
        "| model | float16 file: load s | int8 copy: load s | x | float16 MB | int8 MB | "
        "copy written once in s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['float_median']:.3f} | {r['int8_median']:.3f} | "
            f"{r['int8_median'] / r['float_median']:.2f} | {r['float_file_mb']:.1f} | "
            f"{r['int8_file_mb']:.1f} | {r['write_seconds']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny.en,base")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="ct2_int8_load")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = [
            row
            for name in args.models.split(",")
            if (row := measure(name, args.repeat, args.threads, Path(folder))) is not None
        ]
    text = table(rows, args.repeat, args.threads)
    print(text)
    meta = {"device": "cpu", "threads": args.threads, "repeat": args.repeat}
    results_file.write(args.out, meta, rows, text)


if __name__ == "__main__":
    main()
