"""Intel MKL's kernels on a CPU that is not Intel's: its own choice (generic kernels) against
the kernels it runs on an Intel CPU of the same instruction set (tests/mkl_cpu_type.c
preloaded, as the suite's MKL lanes do), with oneDNN (CTranslate2's choice on AMD) beside.

    .venv/bin/python benchmarks/mkl_kernels.py [--repeat N]

Whole `kvscribe FILE -f txt` processes on the joined real recordings (50 s), tiny.en,
`cpu-laptop`, CT2_FORCE_CPU_ISA=AVX2, the three alternating run after run. Writes
benchmarks/results/mkl_kernels.json and .md.
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

from tests.conftest import KVSCRIBE, wer  # noqa: E402
from tests.ct2_paths import Ct2Path, cpu_vendor  # noqa: E402

CLIP = ROOT / "eval" / "clips_joined" / "joined_real.wav"
MKL = Ct2Path("mkl", "AVX2")


def _settings() -> dict[str, dict[str, str]]:
    generic = MKL.environment()
    generic.pop("LD_PRELOAD", None)
    return {
        "onednn-AVX2": Ct2Path("onednn", "AVX2").environment(),
        "mkl-AVX2, MKL's own choice": generic,
        "mkl-AVX2, Intel's kernels (preloaded)": MKL.environment(),
    }


def _run(env: dict[str, str]) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        subprocess.run(
            [str(KVSCRIBE), str(CLIP), "-f", "txt", "-q", "-o", folder],
            env=env,
            check=True,
            capture_output=True,
            timeout=1800,
        )
        seconds = time.perf_counter() - started
        return seconds, (Path(folder) / f"{CLIP.stem}.txt").read_text(encoding="utf-8")


def _arguments() -> argparse.Namespace:
    parser = results_file.arguments(__doc__, repeat=2)
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if cpu_vendor() == "GenuineIntel":
        raise SystemExit("an Intel CPU: MKL already runs its Intel kernels here")
    repeat = args.repeat
    settings = _settings()
    times: dict[str, list[float]] = {name: [] for name in settings}
    texts: dict[str, str] = {}
    for _ in range(repeat):
        for name, env in settings.items():
            seconds, texts[name] = _run(env)
            times[name].append(seconds)
    reference = CLIP.with_suffix(".txt").read_text(encoding="utf-8")
    rows = [
        {
            "setting": name,
            "runs_s": [round(t, 2) for t in times[name]],
            "median_s": round(statistics.median(times[name]), 2),
            "wer": round(wer(reference, texts[name]), 4),
            "text": texts[name],
        }
        for name in settings
    ]
    meta = {
        "device": "cpu",
        "clip": CLIP.name,
        "model": "tiny.en",
        "repeat": repeat,
        "cpu_vendor": cpu_vendor(),
        "threads": os.cpu_count(),
    }
    table = [
        "# Intel MKL's kernels on a CPU that is not Intel's",
        "",
        f"`kvscribe {CLIP.name} -f txt` (ctranslate2, `cpu-laptop`), whole processes, "
        f"CT2_FORCE_CPU_ISA=AVX2, {repeat} runs each, alternating.",
        "",
        "| setting | median s | runs s | WER |",
        "|---|---|---|---|",
        *(
            f"| {r['setting']} | {r['median_s']:.2f} | {r['runs_s']} | {r['wer']:.3f} |"
            for r in rows
        ),
    ]
    results_file.write("mkl_kernels", meta, rows, "\n".join(table))
    print("\n".join(table))


if __name__ == "__main__":
    main()
