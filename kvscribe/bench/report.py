"""A bench's results as a terminal table, JSON, CSV and markdown (same numbers in each)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from typing import Any

from rich.table import Table

from kvscribe.bench.figures import CellFigures, Claim

COLUMNS = [  # (header, key, how to show it)
    ("cell", "label", str),
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


def _cell(figure: CellFigures, key: str, show) -> str:
    value = getattr(figure, key)
    if value is None:
        return "-"
    text = show(value)
    if key in ("kv_self_peak_bytes", "kv_cross_bytes") and figure.kv_estimated:
        text += " (est.)"
    return text


def rich_table(figures: list[CellFigures]) -> Table:
    table = Table(title="kvscribe bench", title_justify="left", box=None, pad_edge=False)
    for header, _, _ in COLUMNS:
        table.add_column(header, justify="left" if header == "cell" else "right")
    for figure in figures:
        table.add_row(*(_cell(figure, key, show) for _, key, show in COLUMNS))
    return table


def as_json(figures: list[CellFigures], claims: list[Claim], meta: dict[str, Any]) -> str:
    return json.dumps(
        {
            "meta": meta,
            "cells": [asdict(f) for f in figures],
            "claims": [asdict(c) for c in claims],
        },
        indent=2,
    )


def as_csv(figures: list[CellFigures]) -> str:
    out = io.StringIO()
    keys = [k for k in asdict(figures[0]) if k not in ("settings", "kv_trace")] if figures else []
    writer = csv.DictWriter(out, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for figure in figures:
        writer.writerow(asdict(figure))
    return out.getvalue()


def as_markdown(figures: list[CellFigures], claims: list[Claim], meta: dict[str, Any]) -> str:
    lines = ["# kvscribe bench", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items()]
    lines += ["", "| " + " | ".join(h for h, _, _ in COLUMNS) + " |"]
    lines.append("|" + "---|" * len(COLUMNS))
    for figure in figures:
        lines.append("| " + " | ".join(_cell(figure, k, s) for _, k, s in COLUMNS) + " |")
    lines += ["", "## Seed claims", "", "| claim | measured | verdict |", "|---|---|---|"]
    lines += [f"| {c.claim} | {c.measured} | {c.verdict} |" for c in claims]
    lines += ["", _legend()]
    return "\n".join(lines) + "\n"


def _legend() -> str:
    return (
        "ΔWER and KV vs full: against the full cache of the same backend and model. "
        "RTF: summed wall time of every clip / audio length (median over repeats). "
        "ms/token: per decoder step (whisper.cpp: its own mean per call). Peak RSS: the "
        "cell's process (plus whisper-cli's child). kvscribe / engine: kvscribe's time over "
        "the engine called directly with the same options, in the same run. (est.): "
        "computed from the model's dimensions (the engine does not expose its cache)."
    )
