"""Batch folders on a Ray cluster (`--cluster`, `pip install 'kvscribe[ray]'`): the same
planner, manifest and resume as `--jobs`, the work spread over Ray actors.

Ray is imported only when a cluster run starts; without it, `--cluster` is a one-line
error naming the extra to install. Nothing is imported here: every run reads its flags
(kvscribe.cluster.flags), and a run on one machine needs none of the executor's modules.
"""
