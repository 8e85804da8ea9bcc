"""The transcribe command's batch options (the "Batch (with -o)" panel of --help): what a
run that writes into a folder can do, on this machine (--jobs) or a Ray cluster."""

from __future__ import annotations

import typer

PANEL = "Batch (with -o)"


def _switch(flag: str, help_text: str):
    return typer.Option(False, flag, help=help_text, rich_help_panel=PANEL)


JOBS = typer.Option(
    None,
    "--jobs",
    "-j",
    show_default="1 per core, up to 4 that fit in memory; 1 under 4 GB free, transformers, onnx",
    help="Worker processes, each with its own model (needs -o).",
    rich_help_panel=PANEL,
)
FORCE = _switch("--force", "Redo inputs the output folder's manifest says are done.")
FAIL_FAST = _switch("--fail-fast", "Stop at the first failed input.")
JSON_EVENTS = _switch("--json", "One JSON event per file on stdout (started/done/failed/skipped).")
CLUSTER = typer.Option(
    None,
    "--cluster",
    metavar="ray://HOST:PORT|HOST:PORT|auto",
    help="Run the batch on a Ray cluster (pip install 'kvscribe\\[ray]'); auto: "
    "RAY_ADDRESS, else a Ray running here, else a local one for this run.",
    rich_help_panel=PANEL,
)
SHIP_AUDIO = _switch(
    "--ship-audio", "With --cluster: send the files' bytes to the workers (no shared storage)."
)
