"""Where a KV byte figure comes from. Every report says it per figure ("self", "cross"), so
a figure kvscribe could not measure is never shown as if it had been.

- measured: read from real tensors, or printed by the engine itself (whisper.cpp's stderr)
- derived: kvscribe's arithmetic on an engine's figure (whisper.cpp's beam-search
  self-attention cache: its printed size x (beams + 2), read from whisper.cpp's source)
- estimated: computed from the model's dimensions (CTranslate2 does not expose its cache)
"""

from __future__ import annotations

from collections.abc import Iterable

# kvscribe shows bytes in decimal units, as whisper.cpp prints them and the README counts.
BYTES_UNIT = "MB = 10^6 bytes"

MEASURED, DERIVED, ESTIMATED = "measured", "derived", "estimated"
WEAKEST_LAST = (MEASURED, DERIVED, ESTIMATED)
KV_FIGURES = ("self", "cross")


def make_provenance(self_figure: str, cross_figure: str | None = None) -> dict[str, str]:
    """{"self": ..., "cross": ...}; the cross figure's defaults to the self figure's."""
    return {"self": self_figure, "cross": cross_figure or self_figure}


def weakest_provenance(provenances: Iterable[dict[str, str]]) -> dict[str, str]:
    """Per figure, the weakest provenance among several reports (none: measured, as nothing
    was claimed)."""
    merged = make_provenance(MEASURED)
    for given in provenances:
        for figure in KV_FIGURES:
            kind = given.get(figure, ESTIMATED)
            if WEAKEST_LAST.index(kind) > WEAKEST_LAST.index(merged[figure]):
                merged[figure] = kind
    return merged


def weakest_kind(provenance: dict[str, str]) -> str:
    """The weakest of one report's figures: how a sum of them (self + cross) may be called."""
    return max(provenance.values(), key=WEAKEST_LAST.index, default=MEASURED)
