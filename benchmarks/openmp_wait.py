"""OpenMP threads spinning or asleep at a barrier: whole `kvscribe` processes, alone and two
side by side on the same cores, with OMP_WAIT_POLICY unset (each runtime's default: spin a
while, then sleep) and PASSIVE (sleep at once), which the `kvscribe` command now sets
(kvscribe/machine/openmp.py).

    .venv/bin/python benchmarks/openmp_wait.py [--repeat N]

The joined real recordings (50 s), tiny.en, `-f txt`, each engine on every core
(--threads = the cores). The settings alternate, run after run. Writes
benchmarks/results/openmp_wait.json and .md.
"""

from __future__ import annotations

import argparse
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

from tests.conftest import KVSCRIBE  # noqa: E402

CLIP = ROOT / "eval" / "clips_joined" / "joined_real.wav"
BACKENDS = ("transformers", "ctranslate2")
POLICIES = ("unset", "PASSIVE")


# The `kvscribe` command, with OMP_WAIT_POLICY removed again after kvscribe.cli set it and
# before an engine loads: the OpenMP runtime's own default.
_UNSET = (
    "import os, sys, kvscribe.cli as cli; os.environ.pop('OMP_WAIT_POLICY'); "
    "sys.argv[0] = 'kvscribe'; cli.main()"
)


def _command(policy: str) -> list[str]:
    if policy == "unset":
        return [sys.executable, "-c", _UNSET]
    return [str(KVSCRIBE)]


def _env(policy: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    if policy != "unset":
        env["OMP_WAIT_POLICY"] = policy
    return env


def _wall(backend: str, policy: str, side_by_side: int) -> float:
    """Seconds until all `side_by_side` processes have finished."""
    with tempfile.TemporaryDirectory() as folder:
        argv = [*_command(policy), str(CLIP), "--backend", backend, "-f", "txt", "-q", "--force"]
        argv += ["--threads", str(os.cpu_count())]
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                [*argv, "-o", f"{folder}/{i}"],
                env=_env(policy),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for i in range(side_by_side)
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=1800)
            if proc.returncode != 0:
                raise SystemExit(err.decode()[-2000:])
        return time.perf_counter() - started


def _arguments() -> argparse.Namespace:
    parser = results_file.arguments(__doc__, repeat=2)
    return parser.parse_args()


def main() -> None:
    repeat = _arguments().repeat
    rows = []
    for backend in BACKENDS:
        for side_by_side in (1, 2):
            times: dict[str, list[float]] = {p: [] for p in POLICIES}
            for _ in range(repeat):
                for policy in POLICIES:
                    times[policy].append(_wall(backend, policy, side_by_side))
            row = {"backend": backend, "processes": side_by_side}
            row.update({f"{p}_s": [round(t, 2) for t in times[p]] for p in POLICIES})
            row.update({f"{p}_median_s": round(statistics.median(times[p]), 2) for p in POLICIES})
            print(row, flush=True)
            rows.append(row)
    meta = {
        "device": "cpu",
        "clip": CLIP.name,
        "model": "tiny.en",
        "threads": os.cpu_count(),
        "repeat": repeat,
    }
    table = [
        "# OpenMP threads spinning or asleep",
        "",
        f"`kvscribe {CLIP.name} --backend B -f txt --threads {os.cpu_count()}`, whole processes, "
        f"{repeat} runs of each setting, alternating; with 2 processes, the time until both "
        "have finished. OMP_WAIT_POLICY unset: the OpenMP runtime's default (spin, then sleep).",
        "",
        "| backend | processes at once | unset: median s | PASSIVE: median s | runs unset "
        "| runs PASSIVE |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['backend']} | {r['processes']} | {r['unset_median_s']:.2f} | "
            f"{r['PASSIVE_median_s']:.2f} | {r['unset_s']} | {r['PASSIVE_s']} |"
            for r in rows
        ),
    ]
    results_file.write("openmp_wait", meta, rows, "\n".join(table))
    print("\n".join(table))


if __name__ == "__main__":
    main()
