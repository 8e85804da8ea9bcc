"""Two PNG charts: self-attention KV bytes as tokens are decoded, per policy; and WER
against KV memory per cell, with the Pareto front (less memory and lower WER)."""

from __future__ import annotations

from pathlib import Path

from kvscribe.bench.figures import CellFigures
from kvscribe.errors import BackendUnavailableError


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BackendUnavailableError(
            "matplotlib is not installed",
            subject="--plot",
            hint="pip install matplotlib (or -e '.[bench]')",
        ) from None
    return plt


def write_plots(figures: list[CellFigures], folder: Path) -> list[Path]:
    plt = pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in (("kv_vs_tokens.png", kv_figure), ("wer_vs_kv.png", wer_figure)):
        chart = build(plt, figures)
        chart.tight_layout()
        chart.savefig(folder / name, dpi=120)
        plt.close(chart)
        written.append(folder / name)
    return written


def kv_figure(plt, figures: list[CellFigures]):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for figure in figures:
        if figure.kv_trace:
            seen, stored = zip(*figure.kv_trace, strict=True)
            ax.plot(seen, [b / 1e6 for b in stored], label=figure.label, linewidth=1.5)
        elif figure.kv_self_peak_bytes and figure.backend == "whispercpp":
            allocated = figure.kv_self_peak_bytes / 1e6  # whisper.cpp allocates it up front
            ax.axhline(allocated, linestyle="--", label=f"{figure.label} (allocated)")
    ax.set_xlabel("decoder positions seen in the longest 30 s window (prompt + tokens)")
    ax.set_ylabel("self-attention KV stored (MB)")
    ax.set_title("Self-attention cache as decoding proceeds, per policy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def wer_figure(plt, figures: list[CellFigures]):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    points = [(f.kv_total_bytes / 1e6, f.wer, f) for f in figures if f.kv_total_bytes]
    for x, y, figure in points:
        marker = "x" if figure.kv_estimated else "o"
        ax.scatter([x], [y], marker=marker, label=figure.label)
    front = _pareto([(x, y) for x, y, _ in points])
    if len(front) > 1:
        ax.plot(*zip(*front, strict=True), color="grey", linestyle=":", label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel("KV memory, self + cross (MB, log scale; x: estimated)")
    ax.set_ylabel("WER (normalised, pooled over clips)")
    ax.set_title("WER against KV memory per cell")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both memory and WER, by memory."""
    front, best = [], float("inf")
    for x, y in sorted(points):
        if y < best:
            front.append((x, y))
            best = y
    return front
