"""Read the variable table of a CTranslate2 `model.bin` (format v6) without loading weights.

Layout: u32 version, string spec name, u32 revision, u32 variable count; each
variable: string name, u8 rank, u32 dims[rank], u8 dtype, u32 byte count, raw
data; then u32 alias count and (alias, target) string pairs. A string is a u16
length that counts its trailing NUL, then the bytes.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kvscribe.errors import ModelNotFoundError

DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}
_SMALL = 16  # scalars and tiny vectors are read inline; weights are skipped


@dataclass(frozen=True)
class Variable:
    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    offset: int
    value: bytes | None  # only for variables of at most _SMALL bytes


@dataclass(frozen=True)
class WhisperDims:
    """Whisper hyper-parameters, named as openai-whisper's ModelDimensions."""

    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    @property
    def is_multilingual(self) -> bool:
        return self.n_vocab >= 51865


def read_variables(path: Path) -> dict[str, Variable]:
    """Return the model's variables by name (aliases resolved to their target)."""
    try:
        with open(path, "rb") as handle:
            return _read_table(handle)
    except (OSError, struct.error, UnicodeDecodeError, KeyError) as exc:
        raise ModelNotFoundError(
            "not a readable CTranslate2 model.bin",
            subject=str(path),
            hint="the file is damaged or truncated; reinstall the model",
        ) from exc


def read_header(path: Path) -> tuple[str, int]:
    """The model's spec name (WhisperSpec) and spec revision."""
    with open(path, "rb") as handle:
        _check_version(handle)
        return _string(handle), _u32(handle)


def _check_version(handle: BinaryIO) -> None:
    version = _u32(handle)
    if version != 6:
        raise ModelNotFoundError(
            f"CTranslate2 model format v{version} is not supported (v6 is)",
            subject=handle.name,
            hint="re-convert it with CTranslate2 >= 3",
        )


def _read_table(handle: BinaryIO) -> dict[str, Variable]:
    _check_version(handle)
    _string(handle)  # spec name, e.g. WhisperSpec
    _u32(handle)  # spec revision
    variables: dict[str, Variable] = {}
    for _ in range(_u32(handle)):
        variable = _read_variable(handle)
        variables[variable.name] = variable
    for _ in range(_u32(handle)):
        alias, target = _string(handle), _string(handle)
        variables[alias] = variables[target]
    return variables


def _read_variable(handle: BinaryIO) -> Variable:
    name = _string(handle)
    rank = _u8(handle)
    shape = struct.unpack(f"<{rank}I", handle.read(4 * rank))
    dtype = DTYPES[_u8(handle)]
    nbytes = _u32(handle)
    offset = handle.tell()
    value = None
    if nbytes <= _SMALL:
        value = handle.read(nbytes)
    else:
        handle.seek(nbytes, 1)
    if handle.tell() != offset + nbytes or (value is not None and len(value) != nbytes):
        raise struct.error("variable data runs past the end of the file")
    return Variable(name, tuple(shape), dtype, nbytes, offset, value)


def whisper_dims(path: Path) -> WhisperDims:
    """Derive Whisper's dimensions from the shapes in a CTranslate2 model.bin."""
    variables = read_variables(path)
    try:
        conv1 = variables["encoder/conv1/weight"].shape
        audio_pos = variables["encoder/position_encodings/encodings"].shape
        text_pos = variables["decoder/position_encodings/encodings"].shape
        embeddings = variables["decoder/embeddings/weight"].shape
        return WhisperDims(
            n_mels=conv1[1],
            n_audio_ctx=audio_pos[0],
            n_audio_state=audio_pos[1],
            n_audio_head=_scalar(variables["encoder/num_heads"]),
            n_audio_layer=_count_layers(variables, "encoder"),
            n_vocab=embeddings[0],
            n_text_ctx=text_pos[0],
            n_text_state=text_pos[1],
            n_text_head=_scalar(variables["decoder/num_heads"]),
            n_text_layer=_count_layers(variables, "decoder"),
        )
    except KeyError as exc:
        raise ModelNotFoundError(
            f"not a Whisper model (no variable {exc})",
            subject=str(path),
            hint="pass a CTranslate2 Whisper model",
        ) from exc


def _count_layers(variables: dict[str, Variable], stack: str) -> int:
    pattern = re.compile(rf"^{stack}/layer_(\d+)/")
    indices = {int(m.group(1)) for name in variables if (m := pattern.match(name))}
    return max(indices) + 1 if indices else 0


def _scalar(variable: Variable) -> int:
    if variable.value is None:
        raise KeyError(variable.name)
    fmt = {"int8": "<b", "int16": "<h", "int32": "<i"}[variable.dtype]
    return struct.unpack(fmt, variable.value)[0]


def _u8(handle: BinaryIO) -> int:
    return struct.unpack("<B", handle.read(1))[0]  # struct.error at the file's end


def _u32(handle: BinaryIO) -> int:
    return struct.unpack("<I", handle.read(4))[0]


def _string(handle: BinaryIO) -> str:
    (length,) = struct.unpack("<H", handle.read(2))
    return handle.read(length)[:-1].decode("utf-8")
