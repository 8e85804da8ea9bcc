"""The compute paths CTranslate2 can take on this CPU: a GEMM library (Intel MKL, or oneDNN) and
an instruction set. Its int8 kernels round differently on each, so the same model and audio
give different words on different machines: MKL is CTranslate2's choice on Intel CPUs,
oneDNN (AVX2) on AMD ones, and either can be forced on any x86-64 CPU with CT2_USE_MKL and
CT2_FORCE_CPU_ISA (read when CTranslate2 loads, so each path runs in its own process).

The accuracy tests run once per path (tests/test_eval_clips.py, the live pipe test), and
benchmarks/eval_isa.py measures every path, with the bounds set above the worst.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

LIBRARIES = ("mkl", "onednn")
# CTranslate2's x86 instruction sets, newest first, with the CPU flag each needs.
INSTRUCTION_SETS = (("AVX512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx"))
_VARIABLES = ("CT2_USE_MKL", "CT2_FORCE_CPU_ISA")


@dataclass(frozen=True)
class Ct2Path:
    library: str  # "mkl" or "onednn"; "default": CTranslate2's own choice, whatever it is
    isa: str = ""

    @property
    def name(self) -> str:
        return self.library if self.library == "default" else f"{self.library}-{self.isa}"

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (os.environ) with this path forced, and nothing of another one left."""
        env = {k: v for k, v in (os.environ if base is None else base).items()}
        for variable in _VARIABLES:
            env.pop(variable, None)
        if self.library != "default":
            env["CT2_USE_MKL"] = "1" if self.library == "mkl" else "0"
            env["CT2_FORCE_CPU_ISA"] = self.isa
        return env


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux); empty where /proc/cpuinfo is missing."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()}


def available(oldest: str = "AVX2") -> list[Ct2Path]:
    """Every path this CPU can run, each library with each instruction set down to `oldest`
    (the suite stops at AVX2, which every x86-64 CPU of the last decade has; the benchmark
    goes on to AVX). Off x86-64 (no MKL, no forced set), CTranslate2's own choice alone."""
    flags = cpu_flags()
    if platform.machine().lower() not in ("x86_64", "amd64") or not flags:
        return [Ct2Path("default")]
    names = [name for name, _ in INSTRUCTION_SETS]
    wanted = names[: names.index(oldest) + 1]
    sets = [name for name, flag in INSTRUCTION_SETS if name in wanted and flag in flags]
    return [Ct2Path(library, isa) for library in LIBRARIES for isa in sets]
