"""What this machine has (an accelerator, its CPU), found without importing torch."""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Hardware:
    cuda_devices: int
    cuda_memory_gb: float | None  # of device 0; None when it cannot be read

    @property
    def has_cuda(self) -> bool:
        return self.cuda_devices > 0

    def describe(self) -> str:
        if not self.has_cuda:
            return "no CUDA device"
        memory = f"{self.cuda_memory_gb:.1f} GB" if self.cuda_memory_gb else "memory unknown"
        return f"{self.cuda_devices} CUDA device(s), {memory}"


def detect() -> Hardware:
    count = _cuda_device_count()
    return Hardware(count, _nvidia_smi_memory_gb() if count else None)


@functools.cache
def cpu_name() -> str:
    """The CPU's model name with its family and model numbers where /proc/cpuinfo has them
    ("AMD EPYC (family 26, model 2)"; elsewhere the platform's processor string): what
    timings measured on this machine are kept under. A VM's model name is often the bare
    brand, the same for CPUs generations apart that run the same code at different speeds."""
    import platform

    fields = _cpuinfo_fields()
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name


@functools.cache
def cpu_multiplies_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware: Intel AMX (`amx_bf16` in
    /proc/cpuinfo's flags; elsewhere False). There torch's bfloat16 linear layers beat
    float32 (measured, benchmarks/results/transformers_bf16.md); on CPUs with only
    AVX-512 BF16 that is not measured, so they stay on float32."""
    return "amx_bf16" in _cpuinfo_fields().get("flags", "").split()


def _cpuinfo_fields(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo ({} where there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block ends at its blank line
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _cuda_device_count() -> int:
    try:
        import ctranslate2  # light, and a core dependency through faster-whisper
    except ImportError:
        return 0
    try:
        return int(ctranslate2.get_cuda_device_count())
    except RuntimeError:  # driver present but broken
        return 0


def _nvidia_smi_memory_gb() -> float | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits", "--id=0"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        return float(out.strip().splitlines()[0]) / 1024
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
