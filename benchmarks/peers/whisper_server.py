"""whisper.cpp's own HTTP server (examples/server), built once from the source tree and
patches kvscribe builds whisper-cli from (backends/whispercpp/build.py), with the same
portable flags plus the server target, into <cache>/bench/whisper-server-<version>.

    python benchmarks/peers/whisper_server.py        # build if missing, print the path
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from kvscribe.backends.whispercpp import build
from kvscribe.backends.whispercpp.binary import WHISPER_CPP_VERSION
from kvscribe.paths import cache_dir

SERVER_FLAGS = (
    *(
        "-DWHISPER_BUILD_SERVER=ON" if f == "-DWHISPER_BUILD_SERVER=OFF" else f
        for f in build.CMAKE_FLAGS
    ),
    "-DWHISPER_BUILD_EXAMPLES=ON",
)


def server_binary() -> Path:
    """The built whisper-server, building it first when it is missing (minutes)."""
    target = cache_dir() / "bench" / f"whisper-server-{WHISPER_CPP_VERSION}"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)

    def progress(what: str, fraction: float | None) -> None:
        done = "" if fraction is None else f" {fraction:.0%}"
        print(f"whisper-server: {what}{done}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="kvscribe-whisper-server-") as work:
        source = build.patched_source(Path(work), progress)
        jobs = os.cpu_count() or 2
        [built] = build.compile_targets(
            source, Path(work) / "build", progress, jobs, ("whisper-server",), SERVER_FLAGS
        )
        staged = target.with_suffix(".partial")
        staged.write_bytes(built.read_bytes())
        staged.chmod(0o755)
        staged.rename(target)
    return target


if __name__ == "__main__":
    print(server_binary())
