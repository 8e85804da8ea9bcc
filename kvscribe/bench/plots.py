"""PNG charts: self-attention KV bytes as tokens are decoded, per policy; WER against KV
memory per cell, with the Pareto front (less memory and lower WER); and, when batch sizes
were run, WER, KV memory and throughput against batch size, per setting."""

from __future__ import annotations

from pathlib import Path

from kvscribe.bench.figures import CellFigures, batch_rows
from kvscribe.errors import BackendUnavailableError
from kvscribe.provenance import BYTES_UNIT, MEASURED, weakest_kind


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
    charts = [("kv_vs_tokens.png", kv_figure), ("wer_vs_kv.png", wer_figure)]
    if batch_rows(figures):
        charts.append(("batch_tradeoff.png", batch_figure))
    for name, build in charts:
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


MARKERS = {"transformers": "o", "ctranslate2": "x", "whispercpp": "s", "onnx": "D"}


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


def batch_figure(plt, figures: list[CellFigures]):
    """Three panels sharing the batch-size axis, one line per setting: what batching costs
    in WER, what it holds in KV memory (batch totals), and what it buys in throughput."""
    rows = batch_rows(figures)
    settings = list(dict.fromkeys(f.unbatched_label for f in rows))
    sizes = sorted({f.batch_size for f in rows})
    fig, axes = plt.subplots(1, 3, figsize=(14, 5))
    panels = (
        ("WER (normalised, pooled over clips)", lambda f: f.wer),
        (f"KV peak, self + cross, whole batch ({BYTES_UNIT})", _kv_megabytes),
        ("throughput (audio seconds per wall second)", lambda f: f.audio_seconds_per_second),
    )
    for index, setting in enumerate(settings):
        line = [f for f in rows if f.unbatched_label == setting]
        style = {"color": _colour(plt, index), "linestyle": STYLES[index % len(STYLES)]}
        marker = MARKERS.get(line[0].backend, "o")
        for ax, (_, value) in zip(axes, panels, strict=True):
            points = [(f.batch_size, value(f)) for f in line if value(f) is not None]
            if points:
                ax.plot(*zip(*points, strict=True), marker=marker, label=setting, **style)
    for ax, (ylabel, _) in zip(axes, panels, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, labels=[str(size) for size in sizes])
        ax.set_xlabel("batch size (speech chunks decoded at once)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    _label_estimates(axes[1], rows)
    fig.suptitle("Batch trade-off per setting: WER, KV memory and throughput by batch size")
    return fig


def _kv_megabytes(figure: CellFigures) -> float | None:
    return figure.kv_total_bytes / 1e6 if figure.kv_total_bytes else None


def _label_estimates(ax, rows: list[CellFigures]) -> None:
    """The KV panel's legend names each setting, and says which settings' bytes are not all
    measured (CTranslate2's are estimated)."""
    marks: dict[str, str] = {}
    for figure in rows:
        marks[figure.unbatched_label] = marks.get(figure.unbatched_label) or _kv_mark(figure)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, [label + marks.get(label, "") for label in labels], fontsize=7)
