"""Run a bench: clips -> matrix -> one process per cell -> interleaved repeats -> figures."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kvscribe import __version__, profile, registry
from kvscribe.atomic_file import atomic_write_text
from kvscribe.bench import cells as matrix_
from kvscribe.bench.clips import Clip, read_manifest, shipped
from kvscribe.bench.figures import CellFigures, batch_rows, claims, compare, summarise
from kvscribe.bench.placement import Placement, check_requested, place
from kvscribe.bench.report import as_csv, as_json, as_markdown, batch_table, notes, rich_table
from kvscribe.bench.worker import CellProcess
from kvscribe.errors import ExitCode, UsageError
from kvscribe.machine import hardware


@dataclass(frozen=True)
class BenchOptions:
    manifest: Path | None = None
    backends: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()
    policies: tuple[str, ...] | None = None
    batch_sizes: tuple[str, ...] | None = None  # as given ("1,8,16"); None: the profile's
    models: tuple[str, ...] = ()
    repeat: int = 1
    baseline: bool = False
    plot: Path | None = None
    json_out: Path | None = None
    csv_out: Path | None = None
    markdown_out: Path | None = None
    device: str = "auto"  # every cell's: auto (CUDA when present), cpu or cuda
    warm_up: bool = True  # one untimed run per cell before the timed ones


def _check_outputs(options: BenchOptions) -> None:
    from kvscribe.option_values import check_writable

    check_writable(options.json_out, "--json")
    check_writable(options.csv_out, "--csv")
    check_writable(options.markdown_out, "--markdown")
    check_writable(options.plot, "--plot", folder=True)


def main(options: BenchOptions, console: Console) -> int:
    machine = hardware.detect()
    check_requested(options.device, machine)
    for name in options.backends:
        registry.registered(name)  # an unknown name is a usage error, not a skipped cell
    for name in options.profiles:
        profile.load(name, resolve_auto=False)
    _check_outputs(options)  # before minutes of measuring, not after
    # Flags read before the clips and the backends' imports (1.3 s): a typo fails at once.
    policies = matrix_.split_policies(list(options.policies)) if options.policies else None
    sizes = matrix_.parse_batch_sizes(list(options.batch_sizes)) if options.batch_sizes else None
    clips = read_manifest(options.manifest) if options.manifest else shipped()
    cells = matrix_.matrix(
        list(options.backends) or _available_backends(console),
        list(options.profiles) or list(matrix_.PROFILES),
        policies,
        list(options.models) or [None],
        options.baseline,
        sizes,
    )
    placement = place(cells, options.device, machine)
    audio = sum(clip.seconds for clip in clips)
    console.print(
        f"{len(cells)} cells x {len(clips)} clips ({audio:.1f} s of audio) x {options.repeat} "
        f"repeat(s) on --device {options.device} ({placement.found.describe()}); "
        "starting one process per cell",
        style="dim",
    )
    started = time.perf_counter()
    ran, figures = _run_cells(placement, clips, options, console)
    compare(ran, figures)
    found = claims(figures)
    meta = _meta(options, clips, time.perf_counter() - started)
    meta["device"] = placement.describe({f.device for f in figures})
    wide = Console(stderr=True, highlight=False, width=max(console.width, 200))
    wide.print(rich_table(figures))  # a dozen columns: never squeeze them to 80
    if batch_rows(figures):
        wide.print(batch_table(figures))
    for line in notes(figures, placement.skipped):
        console.print(f"[yellow]note[/]: {escape(line)}")
    for claim in found:
        console.print(f"[bold]{claim.verdict}[/]: {escape(claim.claim)}: {escape(claim.measured)}")
    _write_outputs(options, figures, found, meta, placement.skipped, console)
    return ExitCode.OK if len(ran) == len(cells) else ExitCode.SOME_FAILED


def _available_backends(console: Console) -> list[str]:

    found = []
    for name, entry in registry.discover().items():
        reason = entry.backend.check_available() if entry.backend else entry.load_error
        if reason is None:
            found.append(name)
        else:
            console.print(f"[yellow]skipping backend {name}[/]: {escape(str(reason))}")
    if not found:
        raise UsageError("no backend is available here", hint="see `kvscribe backends`")
    return found


def _run_cells(placement: Placement, clips: list[Clip], options: BenchOptions, console: Console):
    """Start every cell that can run, then run them round-robin `options.repeat` times (drift
    hits all alike). Cells that cannot run are added to placement.skipped, with the reason."""
    repeat = options.repeat
    for label, reason in placement.skipped.items():
        console.print(f"[yellow]skipping {escape(label)}[/]: {escape(reason)}")
    devices = placement.devices
    processes: list[CellProcess] = []
    try:
        live = []
        for cell, choice in devices.items():
            # One cell loads and warms up at a time: 20 warm-ups at once on 2 cores thrashed
            # (a 9.5 min bench took over 30), and nothing is timed before all are ready.
            process = CellProcess(cell, clips, choice.device, options.warm_up)
            processes.append(process)
            error = process.ready()
            if error is None:
                live.append(process)
            else:
                placement.skipped[process.cell.label] = error.one_line()
                console.print(
                    f"[yellow]skipping {escape(process.cell.label)}[/]: {escape(error.one_line())}"
                )
                process.close()
        runs = {p.cell: [] for p in live}
        for round_ in range(repeat):
            for process in live:
                console.print(
                    f"round {round_ + 1}/{repeat}: {escape(process.cell.label)}", style="dim"
                )
                runs[process.cell].append(process.run())
    finally:
        for process in processes:
            process.close()
    ran = [p.cell for p in live]
    figures: list[CellFigures] = [
        summarise(cell, runs[cell], clips, devices[cell].note) for cell in ran
    ]
    return ran, figures


def _meta(options: BenchOptions, clips: list[Clip], seconds: float) -> dict:
    import numpy

    versions = {
        "kvscribe": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
    }
    for module in ("ctranslate2", "faster_whisper", "torch", "transformers"):
        with contextlib.suppress(ImportError):
            versions[module] = __import__(module).__version__
    return {
        "command": "kvscribe " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
        "clips": f"{len(clips)} ({sum(c.seconds for c in clips):.1f} s): "
        + ", ".join(c.name for c in clips),
        "repeats": options.repeat,
        "warm-up": "one untimed run per cell"
        if options.warm_up
        else "none (--no-warm-up): each cell's first timed run pays its first-call costs",
        "bench wall": f"{seconds:.0f} s",
        "date": time.strftime("%Y-%m-%d"),
    }


def _write_outputs(
    options: BenchOptions, figures, found, meta, skipped: dict[str, str], console: Console
) -> None:
    written = []
    if options.json_out:
        atomic_write_text(options.json_out, as_json(figures, found, meta, skipped) + "\n")
        written.append(options.json_out)
    if options.csv_out:
        atomic_write_text(options.csv_out, as_csv(figures))
        written.append(options.csv_out)
    if options.markdown_out:
        atomic_write_text(options.markdown_out, as_markdown(figures, found, meta, skipped))
        written.append(options.markdown_out)
    if options.plot:
        from kvscribe.bench.plots import write_plots

        written += write_plots(figures, options.plot)
    if written:
        console.print("[dim]wrote " + escape(", ".join(str(p) for p in written)) + "[/]")
