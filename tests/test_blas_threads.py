"""Every process that loads kvscribe gives numpy's OpenBLAS one thread (kvscribe/__init__.py):
its thread count moves the log-mel's last bit, and its spinning threads slow the engines."""

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


def _blas_threads(imports: str) -> str:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "8"}  # what a user's shell might hold
    probe = PROBE.format(imports=imports)
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="finds the library in /proc")
def test_loading_kvscribe_gives_numpy_s_blas_one_thread():
    plain = _blas_threads("")
    if plain == "none":
        pytest.skip("numpy here is not built on OpenBLAS")
    assert _blas_threads("import kvscribe") == "1"
    # Without kvscribe the same environment gets more wherever there is more than one core,
    # so the probe would see a missing setting.
    if len(os.sched_getaffinity(0)) > 1:
        assert int(plain) > 1
