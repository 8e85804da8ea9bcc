"""numpy's OpenBLAS on one thread (kvscribe/__init__.py: its thread count moves the
log-mel's last bit, and its spinning threads slow the engines): always in the `kvscribe`
command's processes; as a library, unless the program's environment says otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Asks the OpenBLAS that numpy loaded (found in this process's memory map) for its threads.
PROBE = """
import ctypes
{imports}
import numpy
libs = [line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line.lower()]
libs = [path for path in libs if ".so" in path]
if not libs:
    print("none")
else:
    lib = ctypes.CDLL(libs[0])
    names = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
             "openblas_get_num_threads")
    getter = next(getattr(lib, n) for n in names if hasattr(lib, n))
    print(getter())
"""


def _blas_threads(imports: str, setting: str | None) -> str:
    # OpenBLAS also reads OMP_NUM_THREADS (a parallel test worker's share of the cores).
    unset = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    if setting is not None:
        env["OPENBLAS_NUM_THREADS"] = setting  # what a user's shell might hold
    probe = PROBE.format(imports=imports)
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="finds the library in /proc")
def test_numpy_s_blas_gets_one_thread_unless_a_library_user_set_it():
    plain = _blas_threads("", None)
    if plain == "none":
        pytest.skip("numpy here is not built on OpenBLAS")
    assert _blas_threads("import kvscribe", None) == "1"  # nothing set: kvscribe's choice
    assert _blas_threads("import kvscribe.cli", "8") == "1"  # the command decides
    # Without kvscribe the same environment gets more wherever there is more than one core,
    # so the probe would see a missing setting; a library user's own setting is kept.
    if len(os.sched_getaffinity(0)) > 1:
        assert int(plain) > 1
        assert int(_blas_threads("import kvscribe", "2")) == 2
