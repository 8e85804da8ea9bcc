"""kvscribe: Whisper transcription with hardware profiles and KV-cache policies."""

import os

# numpy's OpenBLAS rounds the log-mel product differently with its thread count (an ulp,
# enough to change a word now and then), and its spinning threads fight the engines' for
# the cores (the bench took 1941 s with them, 502 s without). So every process that loads
# kvscribe (the CLI, a --jobs worker, a Ray actor, a benchmark script) gives it one thread,
# and a file transcribes the same in each. The product is small (80 x 201 x 3000 per
# window). Set here, before any kvscribe module loads numpy.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

__version__ = "0.1.0"
