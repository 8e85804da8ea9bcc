"""Where a whole process's CPU time goes, by library: kvscribe's default beside faster-whisper's
BatchedInferencePipeline (or any configuration of benchmarks/longform_configs.py) on the
same recordings, each run under Linux `perf record`, which samples every thread's CPU time.

    .venv/bin/python benchmarks/cpu_by_library.py [--clips A,B] [--configs X,Y] --out NAME

The commands are longform_peers.py's (whole processes, 2 threads, the same model files,
the cache warmed first), run one after the other, one run each: a guide to where the time
goes, not a timing to compare (perf's sampling costs a few per cent; longform_peers.py
times). A sample's library is the one its instruction was in:

- CTranslate2, alignment's median filter: `ctranslate2::ops::MedianFilter`, which only
  its `align` runs (word times; kvscribe aligns every decoded chunk);
- CTranslate2, the rest: the decoder's beam search and alignment's decoder pass, and the
  encoder where CTranslate2's runs it;
- onnxruntime: kvscribe's encoder where the encoder choice took it, and both tools'
  silero voice detector;
- Python, the C library (copies, allocation), the kernel (page faults, scheduling), and
  what is left.

Needs `perf` (Debian: linux-perf) and leave to sample one's own processes
(/proc/sys/kernel/perf_event_paranoid at most 2).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import results_file
from longform_configs import CONFIGS, environment_of
from longform_peers import CLIPS, _names, command, compile_kvscribe, warm_cache

SAMPLES_PER_SECOND = 999
# (category, test on a sample's library and symbol), the first that matches counting.
CATEGORIES = (
    ("CTranslate2: alignment's median filter", lambda dso, sym: "MedianFilter" in sym),
    ("CTranslate2: the rest", lambda dso, sym: "ctranslate2" in dso),
    ("onnxruntime", lambda dso, sym: "onnxruntime" in dso),
    ("Python interpreter", lambda dso, sym: "libpython" in dso or dso.startswith("python")),
    ("C library", lambda dso, sym: dso.startswith("libc.so") or dso.startswith("libc-")),
    ("kernel", lambda dso, sym: "kernel" in dso),
)
OTHER = "other"


def cpu_by_library(argv: list[str], environment: dict) -> dict[str, float]:
    """CPU seconds by category of one run of `argv` under perf."""
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "perf.data"
        record = ["perf", "record", "-q", "-F", str(SAMPLES_PER_SECOND), "-o", str(data)]
        subprocess.run([*record, "--", *argv], env=environment, check=True, capture_output=True)
        fields = ["--sort", "dso,sym", "-F", "period,dso,sym", "--field-separator=\t"]
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none", *fields],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    seconds: dict[str, float] = defaultdict(float)
    for line in report.splitlines():
        fields = [field.strip() for field in line.split("\t")]
        if line.startswith("#") or len(fields) < 3 or not fields[0].isdigit():
            continue
        period, dso, sym = int(fields[0]), fields[1], fields[2]
        seconds[_category(dso, sym)] += period / 1e9  # perf's cpu-clock period: nanoseconds
    return dict(seconds)


def _category(dso: str, sym: str) -> str:
    return next((name for name, test in CATEGORIES if test(dso, sym)), OTHER)


def table(rows: list[dict]) -> str:
    names = [name for name, _ in CATEGORIES] + [OTHER]
    lines = [
        "| clip | config | CPU s | " + " | ".join(names) + " |",
        "|---" * (len(names) + 3) + "|",
    ]
    for row in rows:
        total = sum(row["cpu_seconds"].values())
        cells = [
            f"{row['cpu_seconds'].get(n, 0.0):.2f} ({row['cpu_seconds'].get(n, 0.0) / total:.0%})"
            for n in names
        ]
        lines.append(
            f"| {row['clip']} | {row['config']} | {total:.2f} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clips", help="comma-separated clip names (default: all)")
    parser.add_argument("--configs", default="fw-batched,kvscribe-default")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for every engine")
    parser.add_argument("--out", default="cpu_by_library", help="result file stem")
    args = parser.parse_args()
    clips = [c for c in CLIPS if c.name in _names(args.clips, [c.name for c in CLIPS], "clips")]
    configs = _names(args.configs, list(CONFIGS), "configs")
    compile_kvscribe()
    warm_cache(clips, configs, args.threads)
    rows = []
    for clip in clips:
        for config in configs:
            argv = command(config, clip, args.threads)
            spent = cpu_by_library(argv, os.environ | environment_of(config))
            rows.append({"clip": clip.name, "config": config, "cpu_seconds": spent})
            print(f"{clip.name} {config}: {sum(spent.values()):.2f} CPU s", flush=True)
    markdown = (
        f"One run each under `perf record -F {SAMPLES_PER_SECOND}` (every thread's CPU "
        f"time sampled), {args.threads} threads, the commands of longform_peers.py; CPU "
        "seconds by the library each sample's instruction was in (share of the process's "
        "CPU in brackets).\n\n" + table(rows)
    )
    print(markdown)
    meta = {
        "device": "cpu",
        "threads": args.threads,
        "configs": {name: " ".join(command(name, clips[0], args.threads)) for name in configs},
        "units": "seconds: CPU time summed over every thread (perf's cpu-clock samples)",
    }
    results_file.write(args.out, meta, rows, markdown)


if __name__ == "__main__":
    main()
