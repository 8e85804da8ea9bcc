"""The `kvscribe` entry point ends its process at once (kvscribe.cli.quick_exit), but only
when nothing else runs, and with what the normal exit would give: the status, the atexit
handlers, the flushed streams."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kvscribe.cli import quick_exit
from tests.conftest import SAMPLE

# Runs the real entry point on the real sample with the tiny model; `{extra}` adds to it.
_SCRIPT = """
import atexit, os, sys, threading, time

class Teardown:
    def __del__(self):
        os.write(2, b"torn down\\n")  # sys.stderr may be gone this late

kept = Teardown()  # freed only by the interpreter's own teardown
atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
{extra}
from kvscribe.cli.app import main
sys.argv = ["kvscribe", *sys.argv[1:]]
main()
"""


def _run(tmp_path, *args: str, extra: str = "") -> subprocess.CompletedProcess:
    script = tmp_path / "entry.py"
    script.write_text(_SCRIPT.format(extra=textwrap.dedent(extra)))
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=300
    )


def test_a_finished_command_skips_the_teardown_but_not_atexit_or_its_output(tmp_path):
    done = _run(tmp_path, str(SAMPLE), "-q")
    assert done.returncode == 0, done.stderr
    assert "ask not what your country can do for you" in done.stdout.lower()  # flushed
    assert "atexit ran" in done.stderr
    assert "torn down" not in done.stderr


def test_a_failed_command_keeps_its_exit_status(tmp_path):
    done = _run(tmp_path, str(tmp_path / "missing.wav"), "-q")
    assert done.returncode == 3, done.stderr
    assert "missing.wav" in done.stderr and "atexit ran" in done.stderr


def test_a_thread_still_running_gets_the_normal_exit(tmp_path):
    worker = """
    def late():
        threading.main_thread().join()  # until the command is over, however long it takes
        sys.stderr.write("thread finished\\n")
    threading.Thread(target=late).start()
    """
    done = _run(tmp_path, str(SAMPLE), "-q", extra=worker)
    assert done.returncode == 0, done.stderr
    assert "thread finished" in done.stderr and "torn down" in done.stderr


@pytest.mark.parametrize(
    "code, status, printed", [(None, 0, ""), (4, 4, ""), ("bad flag", 1, "bad flag\n")]
)
def test_exit_codes_are_those_of_pythons_own_exit(code, status, printed, capsys):
    assert quick_exit.exit_code(SystemExit(code)) == status
    assert capsys.readouterr().err == printed
