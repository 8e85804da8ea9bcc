"""Quantized ggml weights through whisper.cpp's own tool (`whisper-quantize`, built by
`kvscribe setup whisper-cpp` from the same source), cached beside the converted models.

The cache key is the source file's content hash and the weight type, so a model is
quantized once per type; the file is written to a temporary name and renamed, so an
interrupted run never leaves a half file that looks done.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kvscribe.errors import BackendUnavailableError, ModelNotFoundError, UsageError
from kvscribe.paths import cache_dir
from kvscribe.staging import staging_file

# whisper.cpp's weight types kvscribe offers (--compute-type for whispercpp). "default" keeps
# the model file's own weights (kvscribe's conversions are F16).
WEIGHT_TYPES = ("default", "q8_0", "q5_0", "q4_0")
# ggml file types "all f32" and "mostly f16": the sources whisper-quantize takes (a file it
# wrote says its type + 1000 x its quantization version, e.g. 2007 for Q8_0).
_F16_FILE_TYPES = (0, 1)


def check_weight_type(value: str, subject: str) -> str:
    if value not in WEIGHT_TYPES:
        raise UsageError(
            f"unknown whisper.cpp weight type {value!r}",
            subject=subject,
            hint=f"use one of: {', '.join(WEIGHT_TYPES)}",
        )
    return value


def quantized_model(source: Path, weights: str, tool: Path | None, file_type: int) -> Path:
    """`source` (an F16/F32 ggml file) with its weights in `weights`, from the cache or made
    now with `tool` (whisper-quantize)."""
    if file_type not in _F16_FILE_TYPES:
        raise UsageError(
            f"this model's weights are already quantized (ggml file type {file_type})",
            subject=str(source),
            hint="leave --compute-type out, or give an F16 model (e.g. a model name)",
        )
    from kvscribe.models.store import file_digest

    target = cache_dir() / "models" / f"{_stem(source)}-{weights}-{file_digest(source)[:16]}.bin"
    if target.is_file():
        return target
    if tool is None:
        raise BackendUnavailableError(
            "whisper-quantize not found, needed for quantized whisper.cpp weights",
            subject="--compute-type",
            hint="run `kvscribe setup whisper-cpp` (it builds whisper-quantize too)",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    _run_tool(tool, source, target, weights)
    return target


def _stem(source: Path) -> str:
    name = source.name.removesuffix(".bin")
    return name.split("-ggml-")[0] + "-ggml" if "-ggml-" in name else name


def _run_tool(tool: Path, source: Path, target: Path, weights: str) -> None:
    staging = staging_file(target)
    try:
        done = subprocess.run(
            [str(tool), str(source), str(staging), weights],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0 or os.path.getsize(staging) == 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise ModelNotFoundError(
                f"whisper-quantize failed ({lines[-1] if lines else f'exit {done.returncode}'})",
                subject=str(source),
                hint="check the model file, or leave --compute-type out",
            )
        os.replace(staging, target)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
