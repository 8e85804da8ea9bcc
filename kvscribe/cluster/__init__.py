"""Batch folders on a Ray cluster (`--cluster`, `pip install 'kvscribe[ray]'`): the same
planner, manifest and resume as `--jobs`, the work spread over Ray actors.

Ray is imported only when a cluster run starts; without it, `--cluster` is a one-line
error naming the extra to install.
"""

import os

# numpy's OpenBLAS with one thread, as kvscribe.cli sets for every kvscribe process. A Ray
# actor's process imports this package first, before anything has loaded numpy (Ray 2.60's
# worker does not), so an actor computes the same features, and text, as a --jobs worker.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

from kvscribe.cluster.connect import INSTALL, check_address, import_ray
from kvscribe.cluster.executor import RayExecutor

__all__ = ["INSTALL", "RayExecutor", "check_address", "import_ray"]
