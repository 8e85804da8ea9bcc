"""At most two glibc malloc arenas in the `kvscribe` command's processes.

glibc gives a thread that allocates while another holds the main arena an arena of its
own, up to eight per core, and memory freed into an arena stays there for that arena's
later allocations. The ctranslate2 backend runs its engine and its single-thread replicas
on threads of their own (backends/ctranslate2/replicas.py), so each grew its own arena. With two
arenas, whole `kvscribe` processes on the telephone recording peaked lower at the same
speed (benchmarks/results/malloc_arenas.md, docs/backends.md#ctranslate2).

A MALLOC_ARENA_MAX the user set is kept. The command's child processes (--jobs workers,
whisper-cli) inherit the setting through the environment, read by glibc as they start;
this process, whose allocator is already running, takes it through mallopt. Elsewhere
than Linux, or on a C library without mallopt, nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import sys

ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h


def limit() -> None:
    """Set at most ARENAS arenas for this process and its children, unless the user chose."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return
    os.environ["MALLOC_ARENA_MAX"] = str(ARENAS)
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library symbols to reach, or no mallopt
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_ARENA_MAX, ARENAS)
