"""The DecoderReport of a whisper-cli run from what it printed: its caches (with what
whisper.cpp allocates but never prints), timings, windows and peak RSS."""

from __future__ import annotations

import re

from kvscribe import setting_rows as row
from kvscribe.backends.whispercpp.report import EngineFigures
from kvscribe.contract import DecodeRequest, DecoderReport
from kvscribe.provenance import DERIVED, MEASURED, make_provenance

_RETRIES = re.compile(r"fallbacks = *(\d+) p")  # whisper_print_timings: decodes redone


def self_cache_factor(decoders: int) -> int:
    """How many single-decoder self-attention caches whisper.cpp holds for `decoders`.

    whisper.cpp prints the size it allocates at start (one decoder), then for beam
    search silently re-allocates it (n + 2)-fold "to work around fragmentation"
    (whisper_full_with_state in 1.8.5, logged at debug level only).
    """
    return decoders + 2 if decoders > 1 else 1


def self_cache_bytes(printed_bytes: int, decoders: int) -> tuple[int, str]:
    """The self-attention bytes whisper.cpp holds for `decoders`, and their provenance: its
    own printed figure (MEASURED) at one decoder, else that figure times self_cache_factor(),
    kvscribe's reading of whisper.cpp's source (DERIVED: whisper.cpp never prints it)."""
    factor = self_cache_factor(decoders)
    return printed_bytes * factor, MEASURED if factor == 1 else DERIVED


def retries(stderr: str) -> int:
    """Decodes whisper.cpp redid at a higher temperature."""
    match = _RETRIES.search(stderr)
    return int(match[1]) if match else 0


def peak_decoders(beams: int, request: DecodeRequest, retried: int) -> int:
    """The most decoders whisper.cpp ran at once: the beams at temperature 0, best-of
    samples above it (the first temperature, or any retry)."""
    temperatures = request.fallback.temperatures
    best_of = request.fallback.best_of
    first = beams if temperatures[0] == 0 else best_of
    return max(first, best_of) if retried and len(temperatures) > 1 else first


def fill_report(
    report: DecoderReport, figures: EngineFigures, peak_rss: int | None, decoders: int
) -> None:
    # Every whisper state (one per processor, -p) prints and holds its own caches: the
    # figures are summed over them.
    states = max(1, figures.states)
    one_state, self_provenance = self_cache_bytes(figures.kv_self_bytes, decoders)
    report.kv_self_peak_bytes = one_state * states
    report.kv_self_full_bytes = report.kv_self_peak_bytes  # whisper.cpp always allocates it whole
    # one cross cache per state, as printed
    report.kv_provenance = make_provenance(self_provenance, MEASURED)
    factor = self_cache_factor(decoders)
    if factor > 1:
        report.settings[row.KV_SELF_ALLOCATION] = (
            f"{figures.kv_self_bytes / 1e6:.2f} MB x {factor} ({decoders} decoders + 2, "
            "re-allocated; derived from whisper.cpp's source)"
        )
    if states > 1:
        report.settings[row.KV_SELF_ALLOCATION] = (
            report.settings.get(row.KV_SELF_ALLOCATION, f"{figures.kv_self_bytes / 1e6:.2f} MB")
            + f", x {states} whisper states (-p)"
        )
    report.kv_cross_bytes = figures.kv_cross_bytes * states
    report.windows = figures.runs.get("encode", 0)
    if "encode" in figures.timings_ms:
        report.encoder_seconds = figures.timings_ms["encode"] / 1000
    report.engine_memory_bytes = dict(figures.memory)
    report.engine_timings_ms = dict(figures.timings_ms)
    report.engine_runs = dict(figures.runs)
    report.engine_peak_rss_bytes = peak_rss
    report.engine_kv_types = dict(figures.kv_types)
