"""A full disk met where kvscribe writes as it goes (a transcript on stdout, `mic -o`
appended per utterance) is one line naming the fix, exit 1: it was an "internal error"
asking for a bug report. /dev/full fails every write with ENOSPC, as a full disk does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kvscribe.errors import ExitCode
from tests.conftest import CARDS, KVSCRIBE, SAMPLE

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(not Path("/dev/full").is_char_device(), reason="needs /dev/full"),
]

LINE = "write failed: No space left on device (free some disk space"


def _run(*args: str, stdout) -> tuple[int, str]:
    done = subprocess.run(
        [str(KVSCRIBE), *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=300,
        env=os.environ.copy(),
    )
    return done.returncode, done.stderr.decode()


def test_a_transcript_on_a_full_stdout_is_one_line():
    with open("/dev/full", "wb") as full:
        code, err = _run(str(CARDS), "-q", "--beam-size", "1", stdout=full)
    assert code == ExitCode.SOME_FAILED and err.startswith("kvscribe: error: "), err
    assert LINE in err and err.count("\n") == 1 and "internal error" not in err


@pytest.mark.slow
def test_a_live_transcript_file_on_a_full_disk_is_one_line_naming_it():
    # JFK's first words are committed with speech still to come: the write fails mid-stream
    args = ("mic", "--live", "--input", str(SAMPLE), "--as-fast-as-possible", "-q")
    code, err = _run(*args, "--beam-size", "1", "-o", "/dev/full", stdout=subprocess.DEVNULL)
    assert code == ExitCode.SOME_FAILED, err
    assert err.startswith(f"kvscribe: error: /dev/full: {LINE}") and err.count("\n") == 1
