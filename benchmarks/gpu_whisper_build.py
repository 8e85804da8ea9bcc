"""whisper-cli built with CUDA for the lent GPU's architecture only (so the build fits the
check's minutes), from the patched source `kvscribe setup whisper-cpp` builds from, into
DIR/whisper-cli (written whole: it appears only once built; a failed build leaves
DIR/BUILD-FAILED, so the check stops waiting). benchmarks/gpu_check.sh runs it beside the
transformers cells, on the carried pywhispercpp sdist.

    python benchmarks/gpu_whisper_build.py DIR SDIST [--cpu]   # --cpu: a rehearsal
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from kvscribe.backends.whispercpp import build


def cuda_flags() -> tuple[str, ...]:
    """GGML_CUDA for this GPU's compute capability (9.0: H100/H200 -> 90). Flash attention's
    kernels for same-type F16 / Q8_0 / Q4_0 K and V are built by default."""
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return ("-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={major}{minor}")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dir", type=Path, metavar="DIR", help="where whisper-cli is written")
    parser.add_argument("sdist", type=Path, metavar="SDIST", help="the pywhispercpp sdist")
    parser.add_argument("--cpu", action="store_true", help="a rehearsal: build without CUDA")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    target, sdist = args.dir, args.sdist
    target.mkdir(parents=True, exist_ok=True)
    try:
        built(target, sdist, not args.cpu)
    except BaseException:
        (target / "BUILD-FAILED").touch()
        raise


def built(target: Path, sdist: Path, cuda: bool) -> None:
    flags = build.CMAKE_FLAGS + (cuda_flags() if cuda else ())

    def progress(message: str, fraction: float | None) -> None:
        print(message if fraction is None else f"{message}: {fraction:.0%}", flush=True)

    with tempfile.TemporaryDirectory(prefix="gpu-whisper-") as work:
        source = build.patched_source(Path(work), progress, sdist)
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
