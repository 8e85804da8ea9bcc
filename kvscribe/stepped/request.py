"""What a request and a backend's profile section decide together, for the engines
kvscribe steps itself (the transformers and onnx backends), and how the stats show it."""

from __future__ import annotations

from typing import Any

from kvscribe import setting_rows as row
from kvscribe.contract import DecodeRequest


def conditioned(request: DecodeRequest | None, settings: dict[str, Any]) -> bool:
    """Whether a window is prompted with the text before it: the request's choice when it
    makes one, else the profile's (default on)."""
    if request is not None and request.condition_on_previous_text is not None:
        return request.condition_on_previous_text
    return bool(settings.get("condition_on_previous_text", True))


def decoding_rows(request: DecodeRequest, settings: dict[str, Any], beams: int) -> dict[str, str]:
    """The stats rows of a request's decoding: beams, prompts and the fallback."""
    return {
        row.BEAM_SIZE: str(beams),
        row.PREVIOUS_TEXT: "on" if conditioned(request, settings) else "off",
        row.TEMPERATURE_FALLBACK: request.fallback.describe(),
    }
