"""What the ctranslate2 backend's engines load, decided once when the backend loads: the compute
type, the CPU threads and the model folder (on a CPU in int8, the cache's int8 copy of a
float model: kvscribe/models/ct2_int8.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EngineChoice:
    compute_type: str
    threads: int
    weights: Path  # the folder the engines load


def choose(settings: dict, device: str, model) -> EngineChoice:
    """`settings`: the profile's `[ctranslate2]` section; `model`: the resolved ModelRef."""
    kind = compute_type(settings, device)
    return EngineChoice(kind, cpu_threads(settings), weights(model, device, kind))


# The profile's `encoder`: "auto" (measured once per machine), "onnxruntime" or "ctranslate2".
ENCODERS = ("auto", "onnxruntime", "ctranslate2")

# What CTranslate2 takes (ctranslate2.get_supported_compute_types names what a device runs).
COMPUTE_TYPES = (
    "default",
    "auto",
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)


def compute_type(settings: dict, device: str) -> str:
    wanted = settings.get("compute_type", "int8" if device == "cpu" else "float16")
    if device == "cpu" and ("float16" in wanted or wanted == "default"):
        # No fast fp16 on CPU: pick what CTranslate2 would fall back to, minus its warning.
        return "int8" if wanted.startswith("int8") else "float32"
    return wanted


def cpu_threads(settings: dict) -> int:
    """The profile's `cpu_threads`, else CTranslate2's default of 4 capped at the cores this
    process may use: 4 threads on 2 cores cost 5-10 % of batched decoding's time (measured,
    benchmarks/results/batched_longform.md)."""
    from kvscribe.machine.capacity import usable_cores

    return int(settings.get("cpu_threads") or min(4, usable_cores()))


def weights(model, device: str, kind: str) -> Path:
    """On a CPU in int8, a copy of a float model's weights in int8 (the same numbers, loaded
    in a quarter of the time), else the model itself."""
    if device != "cpu" or not kind.startswith("int8"):
        return model.path
    from kvscribe.models import store

    return store.int8_weights(model).path
