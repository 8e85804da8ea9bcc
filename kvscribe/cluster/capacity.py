"""Worker slots on a Ray cluster: per node, the rule `--jobs` uses on one machine
(kvscribe.machine.capacity), applied to the node's CPUs and memory as Ray reports them."""

from __future__ import annotations

from dataclasses import dataclass

from kvscribe.errors import BackendUnavailableError
from kvscribe.machine.capacity import workers_for


@dataclass(frozen=True)
class Node:
    id: str
    address: str
    cpus: int
    memory: int  # bytes Ray may hand to tasks on it
    gpus: float


@dataclass(frozen=True)
class Slot:
    """One actor: where it runs and what it asks Ray for."""

    node: Node
    threads: int  # its CPUs, and its engine's threads
    gpus: float


def alive_nodes(ray_nodes: list[dict]) -> list[Node]:
    """The nodes of `ray.nodes()` that are alive."""
    found = []
    for entry in ray_nodes:
        if not entry.get("Alive"):
            continue
        resources = entry.get("Resources", {})
        found.append(
            Node(
                id=entry["NodeID"],
                address=entry.get("NodeManagerAddress", "?"),
                cpus=int(resources.get("CPU", 0)),
                memory=int(resources.get("memory", 0)),
                gpus=float(resources.get("GPU", 0)),
            )
        )
    return found


def slots_on(node: Node, model_bytes: int, per_core: bool = True, wants_gpu: bool = False) -> int:
    """One slot on a small node (under 4 GB); else one per CPU, as many as fit in half the
    node's memory, at most 4; none on a node without CPUs (a head kept for scheduling).
    Not `per_core` (a backend without Capabilities.worker_per_core): one slot with every
    CPU, or one per GPU when the run wants them."""
    if node.cpus < 1:
        return 0
    if not per_core:
        return workers_for(int(node.gpus) if wants_gpu else 1, node.memory, model_bytes, cap=None)
    return workers_for(node.cpus, node.memory, model_bytes)


def plan(nodes: list[Node], model_bytes: int, wants_gpu: bool, per_core: bool = True) -> list[Slot]:
    """Every slot of the cluster, spread so node after node gets its first slot first.
    With `wants_gpu`, only nodes with GPUs get slots, sharing them evenly. `per_core`: as
    slots_on."""
    per_node = []
    for node in nodes:
        if wants_gpu and node.gpus <= 0:
            continue
        count = slots_on(node, model_bytes, per_core, wants_gpu)
        threads = max(1, node.cpus // count) if count else 0
        gpus = node.gpus / count if wants_gpu and count else 0.0
        per_node.append([Slot(node, threads, gpus)] * count)
    slots = [slot for rank in _interleave(per_node) for slot in rank]
    if not slots:
        raise BackendUnavailableError(
            "the Ray cluster has no node that can run a worker"
            + (" with a GPU (the profile asks for CUDA)" if wants_gpu else " (no CPUs)"),
            subject="--cluster",
            hint="add nodes (`ray start --address HEAD:6379`)"
            + (" with GPUs, or choose a CPU profile or --device cpu" if wants_gpu else ""),
        )
    return slots


def _interleave(per_node: list[list[Slot]]) -> list[list[Slot]]:
    """[[a1, a2], [b1]] -> [[a1, b1], [a2]]: the first files go to different nodes."""
    depth = max((len(slots) for slots in per_node), default=0)
    return [[slots[i] for slots in per_node if i < len(slots)] for i in range(depth)]
