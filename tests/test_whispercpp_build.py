"""One build of whisper-cli at a time per cache key: a second `kvscribe setup whisper-cpp`
(or a second test worker) waits for the first, then uses what it built."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from filelock import FileLock

from kvscribe.backends.whispercpp import binary, build

pytestmark = pytest.mark.skipif(
    bool(build.missing_tools()), reason="needs cmake and a C++ compiler"
)


def test_a_build_waits_for_the_one_under_way_and_takes_what_it_built(tmp_path):
    built_meanwhile: list[binary.WhisperCli] = []
    result: list[Path] = []
    lock = FileLock(f"{binary.own_build_dir()}.lock")  # what a first builder holds
    binary.own_build_dir().parent.mkdir(parents=True, exist_ok=True)
    with lock:
        second = threading.Thread(
            target=lambda: result.append(
                build.build(lambda what, fraction: None, unless_found=lambda: built_meanwhile[0])
            )
        )
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and not result  # waiting, not compiling beside it
        # the first build's result, as binary.patched() would then find it
        built_meanwhile.append(binary.WhisperCli(tmp_path / "whisper-cli", "kvscribe build", True))
    second.join(timeout=30)
    assert result == [tmp_path / "whisper-cli"]
