"""A bench's results as a terminal table, JSON, CSV and markdown (same numbers in each)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from typing import Any

from rich.table import Table

from kvscribe.bench.figures import CellFigures, Claim, batch_rows
from kvscribe.provenance import BYTES_UNIT, DERIVED, ESTIMATED, MEASURED, weakest_kind

TITLE = f"kvscribe bench ({BYTES_UNIT})"
# Each KV column's figure in kv_provenance, and how a figure that is not measured is marked.
KV_FIGURE = {"kv_self_peak_bytes": "self", "kv_cross_bytes": "cross"}
MARKS = {ESTIMATED: " (est.)", DERIVED: " (derived)"}

COLUMNS = [  # (header, key, how to show it)
    ("cell", "label", str),
    ("device", "device", str),
    ("batch", "batch_size_run", str),  # as run: a profile's batch size shows here too
    ("WER", "wer", "{:.3f}".format),
    ("ΔWER", "wer_delta", "{:+.3f}".format),
    ("self KV", "kv_self_peak_bytes", lambda v: f"{v / 1e6:.2f} MB"),
    ("cross KV", "kv_cross_bytes", lambda v: f"{v / 1e6:.2f} MB"),
    ("KV vs full", "kv_vs_full_pct", "{:.0f} %".format),
    ("ms/token p50", "decode_ms_p50", "{:.1f}".format),
    ("p95", "decode_ms_p95", "{:.1f}".format),
    ("encoder ms", "encoder_ms", "{:.0f}".format),
    ("RTF", "real_time_factor", "{:.3f}".format),
    ("peak RSS", "peak_rss_bytes", lambda v: f"{v / 1e6:.0f} MB"),
    ("kvscribe / engine", "vs_kvscribe", "{:.3f}".format),
]


BATCH_TITLE = f"Batch trade-off: WER x KV memory x speed ({BYTES_UNIT})"
BATCH_COLUMNS = [  # one row per setting and batch size
    ("cell", "unbatched_label", str),
    ("batch", "batch_size", str),
    ("WER", "wer", "{:.3f}".format),
    ("KV peak, self + cross", "kv_total_bytes", lambda v: f"{v / 1e6:.2f} MB"),
    ("audio s / wall s", "audio_seconds_per_second", "{:.2f}".format),
    ("vs batch 1", "speedup_vs_batch_1", "{:.2f}x".format),
    ("peak RSS", "peak_rss_bytes", lambda v: f"{v / 1e6:.0f} MB"),
]


def _cell(figure: CellFigures, key: str, show) -> str:
    value = getattr(figure, key)
    if value is None:
        return "-"
    text = show(value)
    if key in KV_FIGURE:
        text += MARKS.get(figure.kv_provenance.get(KV_FIGURE[key], ""), "")
    elif key == "device" and figure.device_note:
        text += " (fallback)"
    elif key == "kv_total_bytes":
        kind = weakest_kind(figure.kv_provenance)  # a sum is as good as its weakest part
        text += f" ({kind})" if kind != MEASURED else ""
    elif key == "batch_size" and figure.batch_size_run != value:
        text += f" (ran {figure.batch_size_run})"  # e.g. no clip over 30 s: nothing to batch
    return text


def rich_table(figures: list[CellFigures]) -> Table:
    table = Table(title=TITLE, title_justify="left", box=None, pad_edge=False)
    for header, _, _ in COLUMNS:
        table.add_column(header, justify="left" if header == "cell" else "right")
    for figure in figures:
        table.add_row(*(_cell(figure, key, show) for _, key, show in COLUMNS))
    return table


def batch_table(figures: list[CellFigures]) -> Table:
    table = Table(title=BATCH_TITLE, title_justify="left", box=None, pad_edge=False)
    for header, _, _ in BATCH_COLUMNS:
        table.add_column(header, justify="left" if header == "cell" else "right")
    for figure in batch_rows(figures):
        table.add_row(*(_cell(figure, key, show) for _, key, show in BATCH_COLUMNS))
    return table


def batch_tradeoff(figures: list[CellFigures]) -> list[dict[str, Any]]:
    """The batch trade-off table's rows as numbers, for JSON (empty without batch sizes)."""
    return [
        {
            "cell": f.unbatched_label,
            "label": f.label,
            "batch_size": f.batch_size,
            "batch_size_run": f.batch_size_run,
            "wer": f.wer,
            "kv_peak_bytes": f.kv_total_bytes,
            "kv_peak_provenance": weakest_kind(f.kv_provenance),
            "audio_seconds_per_second": f.audio_seconds_per_second,
            "speedup_vs_batch_1": f.speedup_vs_batch_1,
            "peak_rss_bytes": f.peak_rss_bytes,
        }
        for f in batch_rows(figures)
    ]


def notes(figures: list[CellFigures], skipped: dict[str, str]) -> list[str]:
    """One line per cell that ran elsewhere than asked, or did not run, and why."""
    lines = [f"{f.label}: {f.device_note}" for f in figures if f.device_note]
    return lines + [f"{label}: skipped: {reason}" for label, reason in skipped.items()]


def as_json(
    figures: list[CellFigures],
    claims: list[Claim],
    meta: dict[str, Any],
    skipped: dict[str, str] | None = None,
) -> str:
    return json.dumps(
        {
            "meta": meta,
            "cells": [asdict(f) for f in figures],
            "batch_tradeoff": batch_tradeoff(figures),
            "skipped": skipped or {},  # cell label -> why it did not run
            "claims": [asdict(c) for c in claims],
        },
        indent=2,
    )


def _csv_row(figure: CellFigures) -> dict[str, Any]:
    """A figure's fields as flat columns (per-figure provenance as two columns)."""
    row = asdict(figure)
    provenance = row.pop("kv_provenance")
    row["kv_self_provenance"] = provenance.get("self")
    row["kv_cross_provenance"] = provenance.get("cross")
    return row


def as_csv(figures: list[CellFigures]) -> str:
    out = io.StringIO()
    rows = [_csv_row(f) for f in figures]
    keys = [k for k in rows[0] if k not in ("settings", "kv_trace", "warmed_up")] if rows else []
    writer = csv.DictWriter(out, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def as_markdown(
    figures: list[CellFigures],
    claims: list[Claim],
    meta: dict[str, Any],
    skipped: dict[str, str] | None = None,
) -> str:
    lines = [f"# {TITLE}", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items()]
    lines += ["", "| " + " | ".join(h for h, _, _ in COLUMNS) + " |"]
    lines.append("|" + "---|" * len(COLUMNS))
    for figure in figures:
        lines.append("| " + " | ".join(_cell(figure, k, s) for _, k, s in COLUMNS) + " |")
    lines += _batch_markdown(figures)
    cell_notes = notes(figures, skipped or {})
    if cell_notes:
        lines += ["", "## Notes", ""] + [f"- {line}" for line in cell_notes]
    lines += ["", "## Seed claims", "", "| claim | measured | verdict |", "|---|---|---|"]
    lines += [f"| {c.claim} | {c.measured} | {c.verdict} |" for c in claims]
    lines += ["", _legend()]
    return "\n".join(lines) + "\n"


def _batch_markdown(figures: list[CellFigures]) -> list[str]:
    rows = batch_rows(figures)
    if not rows:
        return []
    lines = ["", f"## {BATCH_TITLE}", ""]
    lines.append("| " + " | ".join(h for h, _, _ in BATCH_COLUMNS) + " |")
    lines.append("|" + "---|" * len(BATCH_COLUMNS))
    for figure in rows:
        lines.append("| " + " | ".join(_cell(figure, k, s) for _, k, s in BATCH_COLUMNS) + " |")
    return [*lines, "", BATCH_LEGEND]


BATCH_LEGEND = (
    "batch: speech chunks decoded at once on audio over 30 s (1: one 30 s window after "
    "another, each prompted with the text before it); (ran N): the size the backend "
    "reported running at, where it differs (1: no clip over 30 s). KV peak: self + "
    "cross-attention, for the whole batch; (estimated): computed from the model's "
    "dimensions (CTranslate2 does not expose its cache). audio s / wall s: throughput over "
    "every clip (median over repeats). vs batch 1: the same setting's batch-1 wall time "
    "over this one's. In the table above, a batched cell's KV figures are batch totals and "
    "its ms/token is per decoder step (one token for every chunk in the batch). "
    f"{BYTES_UNIT}."
)


def _legend() -> str:
    return (
        "ΔWER and KV vs full: against the full cache of the same backend, model and batch size. "
        "RTF: summed wall time of every clip / audio length (median over repeats). "
        "ms/token: per decoder step (whisper.cpp: its own mean per call). Peak RSS: the "
        "cell's process (plus whisper-cli's child). kvscribe / engine: kvscribe's time over "
        "the engine called directly with the same options, in the same run. (est.): "
        "computed from the model's dimensions (the engine does not expose its cache). "
        "(derived): whisper.cpp's printed self-attention size x (beams + 2), kvscribe's "
        f"reading of its source (it re-allocates that cache for beam search). {BYTES_UNIT}. "
        "device (fallback): the backend cannot run on the device asked for (see Notes). "
        "batch: the batch size the backend reported running at (1: sequential; only audio "
        "over 30 s is batched)."
    )
