"""The compute paths CTranslate2 can take on this CPU: a GEMM library (Intel MKL, or oneDNN) and
an instruction set. Its int8 kernels round differently on each, so the same model and audio
give different words on different machines: MKL is CTranslate2's choice on Intel CPUs,
oneDNN (AVX2) on AMD ones, and either can be forced on any x86-64 CPU with CT2_USE_MKL and
CT2_FORCE_CPU_ISA (read when CTranslate2 loads, so each path runs in its own process).

The accuracy tests run once per path (tests/test_eval_clips.py, the live pipe test), and
benchmarks/eval_isa.py measures every path, with the bounds set above the worst.

MKL picks its kernels by CPU vendor as well as by instruction set: on a CPU that is not
Intel's it runs generic ones, 6x slower than oneDNN there and not the code an Intel user
runs. So on such a CPU the MKL lanes preload tests/mkl_cpu_type.c, which tells MKL the
CPU is an Intel one of the forced instruction set (docs/development.md).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

LIBRARIES = ("mkl", "onednn")
# CTranslate2's x86 instruction sets, newest first, with the CPU flag each needs.
INSTRUCTION_SETS = (("AVX512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx"))
_VARIABLES = ("CT2_USE_MKL", "CT2_FORCE_CPU_ISA")
# MKL's code for an Intel CPU with each instruction set (what mkl_serv_cpu_detect answers).
_MKL_CPU_TYPES = {"AVX512": 7, "AVX2": 5, "AVX": 3}
_SHIM_SOURCE = Path(__file__).with_name("mkl_cpu_type.c")


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
        if self.library == "mkl" and cpu_vendor() != "GenuineIntel":
            preload = env.get("LD_PRELOAD", "")
            env["LD_PRELOAD"] = " ".join(filter(None, [str(mkl_intel_kernels(self.isa)), preload]))
        return env


def cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id ("GenuineIntel", "AuthenticAMD"); "" where it is missing."""
    for line in _cpuinfo().splitlines():
        if line.startswith("vendor_id"):
            return line.partition(":")[2].strip()
    return ""


def mkl_intel_kernels(isa: str) -> Path:
    """tests/mkl_cpu_type.c compiled for `isa`, once, into the user cache (C compiler: the
    one whisper-cli is built with). Without one the MKL lanes could only run MKL's generic
    kernels, which no Intel user runs: a failure that names the missing compiler."""
    from kvscribe.paths import cache_dir

    source = _SHIM_SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:12]
    target = cache_dir() / "tests" / f"mkl_cpu_type_{isa}_{digest}.so"
    if target.exists():
        return target
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("the MKL lanes on a non-Intel CPU need a C compiler (apt install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.part")
    define = f"-DMKL_CPU_TYPE={_MKL_CPU_TYPES[isa]}"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", define, str(_SHIM_SOURCE), "-o", str(partial)],
        check=True,
        capture_output=True,
    )
    partial.replace(target)  # atomic: parallel workers never load half a file
    return target


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return ""


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux); empty where /proc/cpuinfo is missing."""
    lines = _cpuinfo().splitlines()
    return {flag for line in lines if line.startswith("flags") for flag in line.split()}


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
