"""`kvscribe setup whisper-cpp`: build whisper-cli and whisper-quantize (CPU) from the
whisper.cpp source that ships inside the pywhispercpp sdist on PyPI, so only the package
registry is needed, with kvscribe's patches applied (backends/whispercpp/patching.py:
quantized KV caches).

Portable flags (no -march=native: the cache may be shared between machines),
static libraries (one self-contained binary), no OpenMP (no libgomp at run
time). The binary is published atomically into the cache, keyed by version; one
process builds a key at a time (a lock beside it), so parallel set-ups and test workers
wait for one build instead of each compiling their own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from kvscribe.backends.whispercpp.binary import (
    QUANTIZE_TOOL,
    SOURCE_PACKAGE,
    WHISPER_CPP_VERSION,
    WhisperCli,
    check,
    own_build_dir,
    own_build_path,
)
from kvscribe.backends.whispercpp.patching import PatchError, apply_all, patches_digest
from kvscribe.errors import BackendUnavailableError
from kvscribe.staging import staging_dir

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_OPENMP=OFF",
    "-DWHISPER_BUILD_TESTS=OFF",
    "-DWHISPER_BUILD_SERVER=OFF",
    "-DWHISPER_SDL2=OFF",
    "-DWHISPER_CURL=OFF",
)
TARGETS = ("whisper-cli", QUANTIZE_TOOL)
logger = logging.getLogger(__name__)
Progress = Callable[[str, float | None], None]  # (what is happening, fraction done or None)
_PERCENT = re.compile(r"^\[\s*(\d+)%\]")


def missing_tools() -> list[str]:
    """Build tools not found on PATH."""
    missing = [] if shutil.which("cmake") else ["cmake"]
    if not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler")
    return missing


def build(
    progress: Progress,
    jobs: int | None = None,
    unless_found: Callable[[], WhisperCli | None] | None = None,
) -> Path:
    """Fetch, configure, compile and install whisper-cli; returns the installed path.
    `unless_found` (binary.patched) is asked once this process holds the build lock: a
    whisper-cli it returns (another process may have built one meanwhile) is used instead."""
    missing = missing_tools()
    if missing:
        raise BackendUnavailableError(
            f"{' and '.join(missing)} not found, needed to build whisper-cli",
            subject="kvscribe setup whisper-cpp",
            hint="install them (Debian/Ubuntu: sudo apt-get install cmake g++; "
            "macOS: xcode-select --install && brew install cmake)",
        )
    target_dir = own_build_dir()
    try:
        target_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackendUnavailableError(
            f"cannot make the build's folder: {exc.strerror or exc}",
            subject=str(target_dir.parent),
            hint="set KVSCRIBE_CACHE_DIR to a folder you can write in",
        ) from None
    with FileLock(f"{target_dir}.lock"):
        found = unless_found() if unless_found is not None else None
        if found is not None:
            return found.path
        with tempfile.TemporaryDirectory(prefix="kvscribe-whisper-cpp-") as work:
            source = patched_source(Path(work), progress)
            jobs = jobs or os.cpu_count() or 2
            _install(compile_targets(source, Path(work) / "build", progress, jobs), target_dir)
    problem = check(own_build_path())
    if problem is not None:
        raise BackendUnavailableError(
            f"the freshly built whisper-cli does not work: {problem}",
            subject=str(own_build_path()),
            hint="rerun with --debug and report the build log",
        )
    return own_build_path()


def patched_source(work: Path, progress: Progress, sdist: Path | None = None) -> Path:
    """The whisper.cpp source kvscribe builds from, fetched into `work` (or unpacked from
    `sdist`, the pywhispercpp archive already at hand: the GPU check's carried copy) and
    patched (the benchmarks build whisper.cpp's own server from it too)."""
    source = _unpack_source(sdist or _download_sdist(work, progress), work, progress)
    _patch(source, progress)
    return source


def _download_sdist(work: Path, progress: Progress) -> Path:
    progress(f"downloading {SOURCE_PACKAGE} (whisper.cpp {WHISPER_CPP_VERSION} source)", None)
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "pywhispercpp"]
    _run([*argv, SOURCE_PACKAGE, "-d", str(work), "--quiet"], "pip download")
    archives = list(work.glob("pywhispercpp-*.tar.gz"))
    if not archives:
        raise BackendUnavailableError(
            "pip downloaded no pywhispercpp sdist",
            subject=SOURCE_PACKAGE,
            hint="check that PyPI is reachable (pip download pywhispercpp==1.5.1)",
        )
    return archives[0]


def _unpack_source(sdist: Path, work: Path, progress: Progress) -> Path:
    progress("unpacking whisper.cpp source", None)
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/whisper.cpp/" in m.name]
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(work / "src", members=members, **safe)
    roots = list((work / "src").glob("*/whisper.cpp"))
    if not roots or not (roots[0] / "CMakeLists.txt").is_file():
        raise BackendUnavailableError(
            "the sdist holds no whisper.cpp source",
            subject=SOURCE_PACKAGE,
            hint="report this: the package layout changed",
        )
    return roots[0]


def _patch(source: Path, progress: Progress) -> None:
    progress("applying kvscribe's patches", None)
    try:
        changed = apply_all(source)
    except PatchError as exc:
        raise BackendUnavailableError(
            f"kvscribe's whisper.cpp patch does not apply ({exc})",
            subject=SOURCE_PACKAGE,
            hint="report this: the patch and the source version disagree",
        ) from None
    logger.debug("patched: %s", ", ".join(changed))


def compile_targets(
    source: Path,
    build_dir: Path,
    progress: Progress,
    jobs: int,
    targets: tuple[str, ...] = TARGETS,
    flags: tuple[str, ...] = CMAKE_FLAGS,
) -> list[Path]:
    """Configure `source` with `flags` and build `targets`; the binaries built."""
    progress("configuring (cmake)", 0.0)
    _run(["cmake", "-S", str(source), "-B", str(build_dir), *flags], "cmake configure")
    argv = ["cmake", "--build", str(build_dir), "--target", *targets, "-j", str(jobs)]
    log: list[str] = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.append(line)
            if match := _PERCENT.match(line):
                progress(f"compiling {' and '.join(targets)} with {jobs} jobs", int(match[1]) / 100)
    if proc.returncode != 0:
        raise _build_failed("cmake --build", "".join(log[-200:]))
    return [_built(build_dir, target) for target in targets]


def _built(build_dir: Path, target: str) -> Path:
    found = [p for p in build_dir.rglob(f"{target}*") if p.is_file() and os.access(p, os.X_OK)]
    if not found:
        raise _build_failed("cmake --build", f"no {target} binary was produced")
    return found[0]


def _install(binaries: list[Path], target_dir: Path) -> None:
    """Copy into a staging dir beside the target, then rename: never a half-installed tool."""
    staging = staging_dir(target_dir)
    try:
        for binary in binaries:
            shutil.copy2(binary, staging / binary.name)
        info = {
            "whisper_cpp": WHISPER_CPP_VERSION,
            "source": SOURCE_PACKAGE,
            "patches": patches_digest(),
            "cmake": CMAKE_FLAGS,
        }
        (staging / "BUILD-INFO.json").write_text(json.dumps(info, indent=2) + "\n")
        if target_dir.exists():
            shutil.rmtree(target_dir)
        staging.rename(target_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise _build_failed(what, (done.stderr or done.stdout)[-2000:])


def _build_failed(what: str, log: str) -> BackendUnavailableError:
    logger.debug("%s output:\n%s", what, log)
    last = [line.strip() for line in log.splitlines() if line.strip()]
    return BackendUnavailableError(
        f"{what} failed: {last[-1] if last else 'no output'}",
        subject="kvscribe setup whisper-cpp",
        hint="rerun with --debug for the full log; a missing compiler or cmake is the usual cause",
    )
