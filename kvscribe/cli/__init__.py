"""Command-line interface (typer + rich)."""

import os

# numpy's OpenBLAS rounds the log-mel product differently with its thread count (an ulp,
# enough to change a word now and then), so every kvscribe process gives it one thread:
# a file then transcribes the same in a plain run, a --jobs worker and a Ray actor. The
# product is small (80 x 201 x 3000 per window). Set here, before numpy is first loaded.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

from kvscribe.cli.app import app, main

__all__ = ["app", "main"]
