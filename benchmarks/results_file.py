"""Where every benchmark script leaves its figures: benchmarks/results/NAME.json and NAME.md.

The README quotes only figures from these files; each says which command wrote it,
on which machine and device, and in which units.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from kvscribe.machine.hardware import cpu_name

RESULTS = Path(__file__).resolve().parent / "results"
# Smoke runs of a script write elsewhere, so a trial never overwrites committed figures.
OUT = Path(os.environ.get("KVSCRIBE_RESULTS_DIR", RESULTS))
UNITS = (
    "seconds: wall clock; bytes: MB = 10^6 bytes; "
    "WER: pooled over clips after Whisper's English normaliser"
)


def arguments(doc: str | None, repeat: int | None = None) -> argparse.ArgumentParser:
    """A benchmark script's parser: its docstring as `--help`'s text, and `--repeat N`
    (runs of each setting) when the script repeats its runs."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if repeat is not None:
        parser.add_argument(
            "--repeat",
            type=int,
            default=repeat,
            metavar="N",
            help="runs of each setting (default: %(default)s)",
        )
    return parser


def machine() -> dict:
    """The machine a figure was measured on."""
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.machine()}",
    }


def command() -> str:
    """The command line that ran this script, as a user would type it."""
    script = Path(sys.argv[0]).resolve().relative_to(RESULTS.parent.parent)
    return shlex.join([".venv/bin/python", str(script), *sys.argv[1:]])


def write(name: str, meta: dict, rows: list[dict], markdown: str) -> None:
    """Write NAME.json (meta + rows) and NAME.md (a header naming command, machine, units:
    meta["units"] where a script's differ from UNITS)."""
    meta = {
        "command": command(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "units": UNITS,
        **meta,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    m = meta["machine"]
    header = (
        f"Written by `{meta['command']}` on {meta['date']}; {m['cpu']}, {m['cores']} cores, "
        f"device {meta.get('device', 'cpu')}. Units: {meta['units']}.\n\n"
    )
    (OUT / f"{name}.md").write_text(header + markdown.rstrip() + "\n")


def grid(rows: list[dict], across: str, down: str, corner: str, head, cell) -> str:
    """A markdown table of `rows`: one line per value of row[down], one column per value of
    row[across] (both in first-seen order), the column titled head(row) and each cell
    cell(row) of the row with those two values."""
    columns = {row[across]: head(row) for row in rows}
    lines = [
        f"| {corner} | " + " | ".join(columns.values()) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for line in dict.fromkeys(row[down] for row in rows):
        found = {row[across]: cell(row) for row in rows if row[down] == line}
        lines.append(f"| {line} | " + " | ".join(found.get(c, "-") for c in columns) + " |")
    return "\n".join(lines)
