"""A CTranslate2 model's weights stored in int8, written once into the cache.

CTranslate2 runs a float16 model (the embedded ones, the hub's) in int8 on a CPU by
quantizing its weights at every load: tiny.en took 0.149 s to load from its float16 file
and 0.037 s from this copy, base 0.253 s against 0.062 (2 cores of an AMD EPYC; the model
alone: benchmarks/results/ct2_int8_load.md). The copy holds what that load makes: each
layer's weight matrix, row by row, scaled by 127 over the row's largest magnitude and
rounded half to even, the scales beside it (CTranslate2's rule, as its own converters
write int8 models), and everything else as the file has it, the encoder's convolutions
included (the load does not quantize them). So the engine reads the same numbers: the
same encoder outputs, tokens, scores and alignment, bit for bit (tests/test_ct2_int8.py).
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from kvscribe.models import ct2_file
from kvscribe.staging import staging_dir

MODEL_FILE = "model.bin"
_DTYPE_IDS = {name: number for number, name in ct2_file.DTYPES.items()}
_FLOATS = ("float16", "float32")


def quantizes(name: str, variable: ct2_file.Variable) -> bool:
    """Whether a load in int8 quantizes this variable: a layer's float weight matrix, not
    the encoder's convolutions."""
    weight = name.endswith("/weight") and len(variable.shape) == 2
    return weight and variable.dtype in _FLOATS and not name.startswith("encoder/conv")


def worth_writing(model_dir: Path) -> bool:
    """Whether `model_dir`'s weights are stored in float (an int8 model needs no copy)."""
    variables = ct2_file.read_variables(model_dir / MODEL_FILE)
    return any(quantizes(name, variable) for name, variable in variables.items())


def write(source: Path, target: Path) -> Path:
    """The model in folder `source` written to folder `target` with int8 weights (the other
    files copied); `target` appears whole or not at all."""
    # A folder of this writer's own beside the target: processes (--jobs workers) or
    # threads writing the same copy at once each finish theirs, and one rename wins.
    staging = staging_dir(target)
    try:
        for path in source.iterdir():
            if path.is_file() and path.name != MODEL_FILE:
                shutil.copyfile(path, staging / path.name)
        _write_model(source / MODEL_FILE, staging / MODEL_FILE)
        try:
            staging.rename(target)
        except OSError:
            if not (target / MODEL_FILE).is_file():  # not another process's copy: a failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_model(source: Path, target: Path) -> None:
    name, revision = ct2_file.read_header(source)
    variables = ct2_file.read_variables(source)
    stored = {n: v for n, v in variables.items() if n == v.name}
    aliases = [(n, v.name) for n, v in variables.items() if n != v.name]
    written = sum(2 if quantizes(n, v) else 1 for n, v in stored.items())
    with open(source, "rb") as reading, open(target, "wb") as out:
        out.write(struct.pack("<I", 6))
        _string(out, name)
        out.write(struct.pack("<I", revision))
        out.write(struct.pack("<I", written))
        for variable_name, variable in stored.items():
            reading.seek(variable.offset)
            data = reading.read(variable.nbytes)
            if quantizes(variable_name, variable):
                matrix = np.frombuffer(data, dtype=variable.dtype).reshape(variable.shape)
                values, scales = _int8_rows(matrix)
                _variable(out, variable_name, variable.shape, "int8", values.tobytes())
                scale_name = f"{variable_name}_scale"
                _variable(out, scale_name, (variable.shape[0],), "float32", scales.tobytes())
            else:
                _variable(out, variable_name, variable.shape, variable.dtype, data)
        out.write(struct.pack("<I", len(aliases)))
        for alias, target_name in aliases:
            _string(out, alias)
            _string(out, target_name)


def _int8_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A weight matrix's rows quantized as CTranslate2 quantizes them: scaled by 127 over
    the row's largest magnitude (a row of zeros by 1), then rounded half to even."""
    values = matrix.astype(np.float32)
    largest = np.abs(values).max(axis=1)
    largest[largest == 0] = 127.0
    largest = np.maximum(largest, np.float32(127) / np.finfo(np.float32).max)
    scales = (np.float32(127) / largest).astype(np.float32)
    values *= scales[:, None]
    return np.rint(values).astype(np.int8), scales


def _variable(out: BinaryIO, name: str, shape: tuple[int, ...], dtype: str, data: bytes) -> None:
    _string(out, name)
    out.write(struct.pack("<B", len(shape)))
    out.write(struct.pack(f"<{len(shape)}I", *shape))
    out.write(struct.pack("<B", _DTYPE_IDS[dtype]))
    out.write(struct.pack("<I", len(data)))
    out.write(data)


def _string(out: BinaryIO, text: str) -> None:
    encoded = text.encode("utf-8")
    out.write(struct.pack("<H", len(encoded) + 1))
    out.write(encoded + b"\0")
