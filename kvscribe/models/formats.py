"""Recognise a model on disk by its files, not by its name."""

from __future__ import annotations

from pathlib import Path

GGML_MAGIC = b"lmgg"  # u32 0x67676d6c, little-endian
CTRANSLATE2 = "ctranslate2"
TRANSFORMERS = "transformers"
GGML = "ggml"
FORMATS = (CTRANSLATE2, TRANSFORMERS, GGML)


def detect_format(path: Path) -> str | None:
    """Return the model format stored at `path`, or None if it holds no model we know."""
    if path.is_dir():
        if (path / "model.bin").is_file():
            return CTRANSLATE2
        weights = list(path.glob("*.safetensors")) + list(path.glob("pytorch_model*.bin"))
        if (path / "config.json").is_file() and weights:
            return TRANSFORMERS
        return None
    if path.is_file():
        with open(path, "rb") as handle:
            if handle.read(4) == GGML_MAGIC:
                return GGML
        if path.name == "model.bin":
            return CTRANSLATE2
    return None
