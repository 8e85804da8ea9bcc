"""OpenMP threads that wait asleep, not spinning, in the `kvscribe` command's processes.

PyTorch and CTranslate2 run their operators on OpenMP thread pools, and an OpenMP thread
that reaches a barrier first spins for a while before it sleeps. On a machine whose cores
are all busy (two kvscribe processes at once, a run beside other work, a test suite on 2
cores) a spinning thread holds the core the thread it waits for needs: two
transformers-backend runs side by side on 2 cores took 57.8 s spinning against 14.9 s
asleep, while one alone took 9.4 s against 10.1 s; CTranslate2 lost nothing
(benchmarks/results/openmp_wait.md, docs/backends.md "Waiting threads sleep").

An OMP_WAIT_POLICY the user set is kept. Set before an engine loads its OpenMP runtime,
which reads it once; child processes inherit it.
"""

from __future__ import annotations

import os


def wait_passively() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
