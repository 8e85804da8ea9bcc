"""No test module may leave kvscribe's temporary files behind.

Each pytest process gets a private TMPDIR (inherited by every `kvscribe` it starts) and,
after a module's tests and fixtures are done, whatever of kvscribe's own is left there
(every temporary folder or file kvscribe makes is named `kvscribe-...`) fails the module's
last test. Module granularity, since a module fixture may hold a temporary folder across
its tests; private, so a kvscribe the developer runs meanwhile is not mistaken for a leak.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

PREFIX = "kvscribe-"


def private_tmpdir() -> Path:
    """Point TMPDIR at a folder of this pytest process's own: for every child, and in an
    xdist worker for this process too. pytest's own temporary folders stay where they were:
    gettempdir() is read (and kept) first, and a worker's come from the controller."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    folder = Path(tempfile.mkdtemp(prefix=f"suite-tmp-{worker or 'main'}-"))
    os.environ["TMPDIR"] = str(folder)
    if worker:
        tempfile.tempdir = str(folder)
    return folder


FOLDER = private_tmpdir()


def left_behind() -> list[str]:
    return sorted(entry.name for entry in FOLDER.iterdir() if entry.name.startswith(PREFIX))


@pytest.fixture(autouse=True, scope="module")
def no_temporary_files_left_behind():
    """Set up first, so torn down last: after the module's own fixtures have closed."""
    before = set(left_behind())
    yield
    leaked = [name for name in left_behind() if name not in before]
    for name in leaked:  # one module's leak is not the next module's failure
        shutil.rmtree(FOLDER / name, ignore_errors=True)
        (FOLDER / name).unlink(missing_ok=True)
    assert not leaked, f"kvscribe left temporary files in {FOLDER}: {leaked}"


def pytest_sessionfinish(session):
    shutil.rmtree(FOLDER, ignore_errors=True)
