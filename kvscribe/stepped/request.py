"""How the stats show a completed request's decoding (Backend.completed), for the engines
kvscribe steps itself (the transformers and onnx backends)."""

from __future__ import annotations

from kvscribe import setting_rows as row
from kvscribe.contract import DecodeRequest


def decoding_rows(request: DecodeRequest, beams: int) -> dict[str, str]:
    """The stats rows of a request's decoding: beams, prompts and the fallback."""
    return {
        row.BEAM_SIZE: str(beams),
        row.PREVIOUS_TEXT: "on" if request.condition_on_previous_text else "off",
        row.TEMPERATURE_FALLBACK: request.fallback.describe(),
    }
