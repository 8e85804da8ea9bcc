"""Command-line interface (typer + rich)."""

import os

# The command's own processes: numpy's BLAS on one thread whatever the shell holds (why:
# kvscribe/__init__.py), before anything below loads numpy.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

from kvscribe.machine import malloc_arenas, openmp

malloc_arenas.limit()  # before any engine starts its threads
openmp.wait_passively()  # before any engine loads its OpenMP runtime

from kvscribe.cli.app import app, main, run  # noqa: E402  (after the settings above)

__all__ = ["app", "main", "run"]
