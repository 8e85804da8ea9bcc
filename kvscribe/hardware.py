"""What accelerator this machine has, found without importing torch."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


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
