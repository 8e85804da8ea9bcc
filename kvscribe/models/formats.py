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


# The files kvscribe reads of a model folder besides its weights, by format: a folder
# lacking one is refused when it is found, naming the file, rather than failing inside an
# engine (faster-whisper fetches a missing tokenizer.json from the hub: offline, an
# internal error).
_NEEDS = {
    CTRANSLATE2: (
        ("model.bin",),
        ("config.json",),
        ("tokenizer.json",),
        ("vocabulary.txt", "vocabulary.json"),
    ),
    TRANSFORMERS: (
        ("model.safetensors",),
        ("config.json",),
        ("generation_config.json",),
        ("tokenizer.json",),
    ),
}


def missing_file(folder: Path, fmt: str) -> str | None:
    """The first file a model folder of format `fmt` needs and lacks ("a or b" where either
    will do), or None when it has them all."""
    for choices in _NEEDS.get(fmt, ()):
        if not any((folder / name).is_file() for name in choices):
            return " or ".join(choices)
    return None


def needed_files(fmt: str) -> str:
    """The files a model folder of format `fmt` holds, for an error's hint."""
    return ", ".join(" or ".join(choices) for choices in _NEEDS.get(fmt, ()))
