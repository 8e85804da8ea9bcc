"""kvscribe: Whisper transcription with hardware profiles and KV-cache policies."""

import os

# numpy's OpenBLAS rounds the log-mel product differently with its thread count (an ulp,
# enough to change a word now and then), and its spinning threads fight the engines' for
# the cores (the bench took 1941 s with them, 502 s without). The product is small (80 x
# 201 x 3000 per window), so one thread is best. Imported as a library, kvscribe only
# suggests it: a value the program's environment already holds is kept. The `kvscribe`
# command (kvscribe/cli/__init__.py) sets it outright, and its --jobs workers inherit it,
# so a file transcribes the same in each of its processes. Set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
