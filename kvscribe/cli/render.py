"""How results look on a terminal: the stats table, error lines, byte sizes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvscribe.errors import KvscribeError
from kvscribe.provenance import BYTES_UNIT, MEASURED


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


def setup_logging(debug: bool) -> None:
    import logging
    import sys

    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )


def exit_with(run: Callable[[], int], console: Console, debug: bool) -> NoReturn:
    """Run a command body; exit with its code, or print its KvscribeError in one line and
    exit with that error's code (the traceback too with --debug)."""
    try:
        code = run()
    except KvscribeError as exc:
        if debug:
            console.print_exception()
        print_error(console, exc)
        raise typer.Exit(exc.exit_code) from None
    raise typer.Exit(code)


def print_error(console: Console, error: KvscribeError) -> None:
    console.print(
        f"[bold red]kvscribe: error:[/] {escape(error.one_line())}",
        markup=True,
        soft_wrap=True,
        highlight=False,
    )


def human_bytes(value: int | None) -> str:
    """A byte count in decimal units: kB = 10^3, MB = 10^6, GB = 10^9 bytes."""
    if value is None:
        return "unavailable"
    size = float(value)
    for unit in ("B", "kB", "MB"):
        if abs(size) < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def provenance_mark(kind: str) -> str:
    """How a KV figure's provenance shows beside it: nothing when measured, else
    "(estimated)" or "(derived)" (see kvscribe.provenance)."""
    return "" if kind == MEASURED else f" [dim]({kind})[/]"


def kv_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Self- and cross-attention KV bytes, each marked with its provenance (stats reports of
    file runs and live sessions alike)."""
    provenance = report["kv_provenance"]
    self_value = (
        human_bytes(report["kv_self_peak_bytes"])
        + provenance_mark(provenance["self"])
        + f" [dim](full cache: {human_bytes(report['kv_self_full_bytes'])})[/]"
    )
    cross_value = human_bytes(report["kv_cross_bytes"]) + provenance_mark(provenance["cross"])
    batch = report.get("kv_batch_size", 1)
    if batch > 1:  # the figures are totals over the chunks decoded together
        self_value += f" [dim](batch of {batch})[/]"
        cross_value += f" [dim](batch of {batch})[/]"
    return [("self-attn KV peak", self_value), ("cross-attn KV", cross_value)]


def policy_rows(notes: list[str], not_applicable: list[str]) -> list[tuple[str, str]]:
    """What a run did not do as asked: its notes (e.g. another device) and the policy parts
    the backend could not honour (file runs and live sessions alike)."""
    rows = [("note", note) for note in notes]
    return rows + [("not applicable", note) for note in not_applicable]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _measured_decoder_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows only a backend that runs the decoder itself can fill."""
    rows = []
    if report.get("encoder_seconds") is not None:
        rows.append(("encoder", _seconds(report["encoder_seconds"])))
    if report.get("decode_ms_per_token_p50") is not None:
        rows.append(
            (
                "decode ms / token p50 / p95",
                "{:.1f} / {:.1f}".format(
                    report["decode_ms_per_token_p50"], report["decode_ms_per_token_p95"]
                ),
            )
        )
    if report.get("first_token_seconds") is not None:
        rows.append(("first token", _seconds(report["first_token_seconds"])))
    if report.get("recompute_macs"):
        rows.append(("half-layer recompute", f"{report['recompute_macs'] / 1e9:.2f} GMAC extra"))
    return rows


def _rss_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """RSS over the run (start, after the first window, end): flat in a long file's length."""
    keys = ("rss_start_bytes", "rss_after_warmup_bytes", "rss_end_bytes")
    if report.get(keys[0]) is None:
        return []
    values = [human_bytes(report[k]) if report.get(k) is not None else "-" for k in keys]
    return [("RSS start / warmed up / end", " / ".join(values))]


def _engine_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The engine's own figures (whisper.cpp), when it reported any."""
    rows = []
    memory = report.get("engine_memory_bytes") or {}
    if memory:
        rows.append(
            ("engine buffers", ", ".join(_engine_buffer(report, k, v) for k, v in memory.items()))
        )
    timings, runs = report.get("engine_timings_ms") or {}, report.get("engine_runs") or {}
    steps = runs.get("decode", 0) + runs.get("batchd", 0)
    if steps:
        step_ms = (timings.get("decode", 0.0) + timings.get("batchd", 0.0)) / steps
        rows.append(("engine decode ms / step", f"{step_ms:.1f} (mean over {steps} steps)"))
    if report.get("engine_peak_rss_bytes") is not None:
        rows.append(("engine peak RSS", human_bytes(report["engine_peak_rss_bytes"])))
    return rows


def _engine_buffer(report: dict[str, Any], name: str, nbytes: int) -> str:
    """`kv self 1.7 MB q8_0 (F16: 3.1 MB, derived)`: a cache's size in the type whisper.cpp
    stored it in, next to what F16 would hold."""
    text = f"{name} {human_bytes(nbytes)}"
    kind = (report.get("engine_kv_types") or {}).get(name)
    if kind:
        text += f" {kind}"
    f16 = (report.get("engine_kv_f16_bytes_derived") or {}).get(name)
    if f16:
        text += f" (F16: {human_bytes(f16)}, derived)"
    return text


def figures_table(title: str, rows: list[tuple[str, str]]) -> Table:
    """Label / value rows under a title, no borders: how every stats report looks."""
    table = Table(
        title=title,
        title_justify="left",
        show_header=False,
        box=None,
        pad_edge=False,
        padding=(0, 2, 0, 0),
    )
    table.add_column(style="bold")
    table.add_column()
    for label, value in rows:
        table.add_row(label, value)
    return table


def unread_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Speech the batched decoder skipped in every read of it, whose words are not in the
    text (kvscribe.rereads; each file's warning names it). No row when there is none."""
    stretches = report.get("speech_unread_stretches") or 0
    if not stretches:
        return []
    seconds = report["speech_unread_seconds"]
    return [("speech not transcribed", f"{seconds:.1f} s in {stretches} stretch(es)")]


def _time_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Where the time went: by stage, where the backend times its stages, and how busy the
    cores were over the run."""
    rows = []
    stages = report.get("stage_seconds") or {}
    if stages:
        rows.append(("time by stage", ", ".join(f"{k} {v:.2f}" for k, v in stages.items()) + " s"))
    return rows + cores_busy_rows(report)


def cores_busy_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """How busy the cores were over the run (file runs and live sessions)."""
    if report.get("cores_busy") is None:
        return []
    busy, cores = report["cores_busy"], report["cores"]
    figures = f"{busy * cores:.2f} of {cores} ({busy:.0%}): "
    return [("cores busy", figures + f"{report['cpu_seconds']:.2f} CPU s over the wall time")]


def stats_table(report: dict[str, Any]) -> Table:
    """The run's figures as a two-column table (the same numbers --stats-json writes)."""
    rtf = report["real_time_factor"]
    rows = [
        ("backend / profile", f"{report['backend']} / {report['profile']}"),
        ("model / device", f"{report['model']} / {report['device']}"),
        *((k, v) for k, v in report["settings"].items()),
        ("files", f"{report['files_done']} done, {report['files_failed']} failed"),
        ("audio", _seconds(report["audio_seconds"])),
        ("wall", _seconds(report["wall_seconds"])),
        ("real-time factor", "-" if rtf is None else f"{rtf:.3f} ({1 / rtf:.1f}x real time)"),
        ("model load", _seconds(report["load_seconds"])),
        ("transcribe", _seconds(report["transcribe_seconds"])),
        ("first segment", _seconds(report["first_segment_seconds"])),
        ("tokens decoded", str(report["tokens_decoded"])),
        (
            "ms / token (incl. encoder)",
            "-"
            if report["ms_per_token_incl_encoder"] is None
            else f"{report['ms_per_token_incl_encoder']:.1f}",
        ),
        *_measured_decoder_rows(report),
        *unread_rows(report),
        *_time_rows(report),
        *kv_rows(report),
        ("peak RSS", human_bytes(report["peak_rss_bytes"])),
        *_rss_rows(report),
    ]
    rows += _engine_rows(report)
    rows += policy_rows(report.get("notes", []), report["not_applicable"])
    return figures_table(f"kvscribe stats ({BYTES_UNIT})", rows)
