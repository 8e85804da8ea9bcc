"""What `--cluster` and `--ship-audio` ask for, checked before any work is planned."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvscribe.errors import UsageError
from kvscribe.options import TranscribeOptions


@dataclass(frozen=True)
class ClusterRun:
    address: str  # auto, ray://HOST:PORT or HOST:PORT
    ship_audio: bool  # files' bytes go through Ray's object store (no shared storage)

    def executor(self, options: TranscribeOptions, model_bytes: int):
        from kvscribe.cluster.executor import RayExecutor

        return RayExecutor(options, self.address, self.ship_audio, model_bytes)


def cluster_run(
    address: str | None, ship_audio: bool, jobs: int | None, output_dir: Path | None
) -> ClusterRun | None:
    """The cluster run the flags ask for (None: this machine), or a one-line error; a
    missing Ray, or an address nothing answers at, is reported here, before a model is
    converted, a file read or the output folder made."""
    if address is None:
        if ship_audio:
            raise UsageError(
                "only applies to --cluster runs", subject="--ship-audio", hint="add --cluster"
            )
        return None
    if output_dir is None:
        raise UsageError(
            "a cluster run is a batch into a folder",
            subject="--cluster",
            hint="add --output-dir DIR",
        )
    if jobs is not None:
        raise UsageError(
            "the cluster's nodes decide how many workers run, not --jobs",
            subject="--cluster",
            hint="leave out --jobs (or --cluster, to run on this machine)",
        )
    from kvscribe.cluster.connect import check_address, check_reachable, import_ray

    check_address(address)
    import_ray()
    check_reachable(address)
    return ClusterRun(address, ship_audio)
