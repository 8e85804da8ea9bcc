"""Batch folders on a Ray cluster (`--cluster`, `pip install 'kvscribe[ray]'`): the same
planner, manifest and resume as `--jobs`, the work spread over Ray actors.

Ray is imported only when a cluster run starts; without it, `--cluster` is a one-line
error naming the extra to install.
"""

from kvscribe.cluster.connect import INSTALL, check_address, import_ray
from kvscribe.cluster.executor import RayExecutor

__all__ = ["INSTALL", "RayExecutor", "check_address", "import_ray"]
