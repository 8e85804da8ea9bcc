"""whisper-cli built with CUDA for the lent GPU's architecture only (so the build fits the
check's minutes), from the patched source `kvscribe setup whisper-cpp` builds from, into
DIR/whisper-cli (written whole: it appears only once built). benchmarks/gpu_check.sh runs
it beside the transformers cells; pip finds the source sdist among the carried files.

    python benchmarks/gpu_whisper_build.py DIR [--cpu]   # --cpu: no CUDA (a rehearsal)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from kvscribe.backends.whispercpp import build


def cuda_flags() -> tuple[str, ...]:
    """GGML_CUDA for this GPU's compute capability (9.0: H100/H200 -> 90). Flash attention's
    kernels for same-type F16 / Q8_0 / Q4_0 K and V are built by default."""
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return ("-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={major}{minor}")


def main() -> None:
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    flags = build.CMAKE_FLAGS + (() if "--cpu" in sys.argv else cuda_flags())

    def progress(message: str, fraction: float | None) -> None:
        print(message if fraction is None else f"{message}: {fraction:.0%}", flush=True)

    with tempfile.TemporaryDirectory(prefix="gpu-whisper-") as work:
        source = build.patched_source(Path(work), progress)
        jobs = os.cpu_count() or 2
        built = build.compile_targets(
            source, Path(work) / "build", progress, jobs, ("whisper-cli",), flags
        )
        staging = target / "whisper-cli.part"
        shutil.copy2(built[0], staging)
        staging.rename(target / "whisper-cli")
    print(f"built {target / 'whisper-cli'}", flush=True)


if __name__ == "__main__":
    main()
