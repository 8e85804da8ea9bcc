"""Two PNG charts: self-attention KV bytes as tokens are decoded, per policy; and WER
against KV memory per cell, with the Pareto front (less memory and lower WER)."""

from __future__ import annotations

from pathlib import Path

from kvscribe.bench.figures import CellFigures
from kvscribe.cli.render import BYTES_UNIT
from kvscribe.errors import BackendUnavailableError
from kvscribe.provenance import MEASURED, weakest_kind


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


STYLES = ("-", "--", "-.", ":")


def _colour(plt, index: int):
    return plt.get_cmap("tab20")(index % 20)


def kv_figure(plt, figures: list[CellFigures]):
    """Bytes stored after each decoded token, in each cell's longest window (the first
    point includes that window's prompt); whisper.cpp's cache is allocated up front."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for index, figure in enumerate(figures):
        style = {"color": _colour(plt, index), "linestyle": STYLES[index % len(STYLES)]}
        if figure.kv_trace:
            stored = [b / 1e6 for _, b in figure.kv_trace]
            ax.plot(range(len(stored)), stored, label=figure.label, linewidth=1.6, **style)
        elif figure.kv_self_peak_bytes and figure.backend == "whispercpp":
            allocated = figure.kv_self_peak_bytes / 1e6
            kind = figure.kv_provenance.get("self", MEASURED)
            how = "allocated" if kind == MEASURED else f"allocated, {kind}"
            ax.axhline(allocated, label=f"{figure.label} ({how})", linewidth=1.2, **style)
    ax.set_xlabel("tokens decoded in the window (each cell's longest 30 s window)")
    ax.set_ylabel(f"self-attention KV stored ({BYTES_UNIT})")
    ax.set_title("Self-attention cache as decoding proceeds, per policy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


MARKERS = {"transformers": "o", "ctranslate2": "x", "whispercpp": "s"}


def wer_figure(plt, figures: list[CellFigures]):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    points = [(f.kv_total_bytes / 1e6, f.wer, f) for f in figures if f.kv_total_bytes]
    wers = sorted(y for _, y, _ in points)
    top = max(0.05, 2.5 * wers[len(wers) // 2]) if wers else 1.0  # outliers drawn at the top
    for index, (x, y, figure) in enumerate(points):
        marker = "^" if figure.kind != "kvscribe" else MARKERS.get(figure.backend, "o")
        label = figure.label + _kv_mark(figure)
        label += f" (WER {y:.2f}, off the scale)" if y > top else ""
        ax.scatter([x], [min(y, top)], marker=marker, color=_colour(plt, index), label=label, s=40)
    if any(y > top for _, y, _ in points):
        ax.set_ylim(0, top * 1.05)
    front = _pareto([(x, y) for x, y, _ in points])
    if len(front) > 1:
        ax.plot(*zip(*front, strict=True), color="grey", linestyle=":", label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel(f"KV memory, self + cross ({BYTES_UNIT}, log scale)")
    ax.set_ylabel("WER (normalised, pooled over clips)")
    ax.set_title("WER against KV memory per cell")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def _kv_mark(figure: CellFigures) -> str:
    """' (KV estimated)' or ' (KV derived)' for a cell whose KV sum is not all measured."""
    kind = weakest_kind(figure.kv_provenance) if figure.kv_provenance else MEASURED
    return "" if kind == MEASURED else f" (KV {kind})"


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both memory and WER, by memory."""
    front, best = [], float("inf")
    for x, y in sorted(points):
        if y < best:
            front.append((x, y))
            best = y
    return front
