"""`kvscribe bench`: backends x profiles x cache policies on real speech, side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import typer

from kvscribe.cli.parameters import ParameterTable, option_values, takes
from kvscribe.cli.render import exit_with, setup_logging, stderr_console

PARAMETERS: ParameterTable = {
    "manifest": (
        Path,
        typer.Option(
            None,
            "--manifest",
            dir_okay=False,
            show_default="the shipped JFK clip and 50 s of real speech",
            help="TSV: audio path <TAB> reference text or .txt path.",
        ),
    ),
    "backend": (
        list[str],
        typer.Option(
            None, "--backend", "-b", show_default="every available", help="Backends (repeatable)."
        ),
    ),
    "profile": (
        list[str],
        typer.Option(
            None, "--profile", "-p", show_default="cpu-laptop, tiny-vram, no-loss", help="Profiles."
        ),
    ),
    "policy": (
        list[str],
        typer.Option(
            None,
            "--policy",
            show_default="the seed claims' policies",
            help="Self-attention policies for the transformers backend, e.g. "
            "'full,sink=4,window=32,q8_0' (a new policy starts at `full` or a repeated part; "
            "repeat --policy for policies with ';').",
        ),
    ),
    "batch_sizes": (
        list[str],
        typer.Option(
            None,
            "--batch-sizes",
            show_default="the profile's",
            help="Run each cell of a batching backend (ctranslate2, transformers, onnx) at "
            "these batch sizes, e.g. 1,8,16 (speech chunks decoded at once on audio over "
            "30 s; 1 = the sequential path), and add a batch trade-off table and chart: WER, "
            "KV peak and throughput per batch size.",
        ),
    ),
    "model": (
        list[str],
        typer.Option(None, "--model", "-m", show_default="tiny.en", help="Models."),
    ),
    "device": (
        Literal["auto", "cpu", "cuda"],
        typer.Option(
            "auto",
            "--device",
            help="Run every cell here (auto: CUDA when present, else cpu). With auto, a backend "
            "that cannot run there (whispercpp: CPU only) runs on the CPU, noted in its row; with "
            "cpu or cuda, such a cell is skipped with the reason.",
        ),
    ),
    "repeat": (
        int,
        typer.Option(1, "--repeat", min=1, help="Timed runs per cell (medians)."),
    ),
    "warm_up": (
        bool,
        typer.Option(
            True,
            "--warm-up/--no-warm-up",
            help="One untimed run per cell before the timed ones (the first clip, and one over "
            "30 s where the cell may batch). Without it each cell's first timed run pays for "
            "its caches and first calls: quicker, for the text, WER and memory, not the speed.",
        ),
    ),
    "baseline": (
        bool,
        typer.Option(
            False,
            "--baseline",
            help="Also run faster-whisper (its transcribe and its BatchedInferencePipeline) and "
            "whisper-cli directly.",
        ),
    ),
    "plot": (
        Path,
        typer.Option(None, "--plot", file_okay=False, help="Write PNG charts here."),
    ),
    "json_out": (
        Path,
        typer.Option(None, "--json", dir_okay=False, help="Write results as JSON."),
    ),
    "csv_out": (
        Path,
        typer.Option(None, "--csv", dir_okay=False, help="Write results as CSV."),
    ),
    "markdown_out": (
        Path,
        typer.Option(None, "--markdown", dir_okay=False, help="Write a markdown report."),
    ),
    "debug": (
        bool,
        typer.Option(False, "--debug", help="Show tracebacks."),
    ),
}


@takes(PARAMETERS)
def bench(**given: Any) -> None:
    """Measure backends x profiles x cache policies (x batch sizes): WER, KV bytes, speed.

    Each cell runs in its own process (model loaded once, one untimed warm-up
    unless --no-warm-up), cells are interleaved each repeat, and --baseline adds the engines called
    directly with the same options, in the same run.
    """
    from kvscribe.bench import run as bench_run

    console = stderr_console()
    setup_logging(given["debug"])

    def body() -> int:  # options built inside exit_with, so a bad one is one line too
        options = bench_run.BenchOptions(
            **option_values(given, bench_run.BenchOptions)
            | {
                "backends": tuple(given["backend"] or ()),
                "profiles": tuple(given["profile"] or ()),
                "policies": tuple(given["policy"]) if given["policy"] else None,
                "batch_sizes": tuple(given["batch_sizes"]) if given["batch_sizes"] else None,
                "models": tuple(given["model"] or ()),
            }
        )
        return bench_run.main(options, console)

    exit_with(body, console, given["debug"])
