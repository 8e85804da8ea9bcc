"""How many batch workers to run: one model each, so memory decides as much as cores."""

from __future__ import annotations

import os

WORKER_BASE_BYTES = 300_000_000  # interpreter, engine libraries, audio buffers
WEIGHTS_FACTOR = 3  # loaded weights plus working memory, per byte of model file


def available_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def process_cpu_seconds() -> float:
    """CPU seconds this process has used (user and system, every thread) and the child
    processes it has waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def usable_cores() -> int:
    """OMP_NUM_THREADS (a batch worker's share), else the cores this process may use."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def usable_physical_cores() -> int:
    """usable_cores(), counting each physical core once (SMT siblings share one): what
    torch's intra-op pool defaults to. Linux topology; elsewhere usable_cores()."""
    usable = usable_cores()
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() or not hasattr(os, "sched_getaffinity"):
        return usable
    cores = set()
    for cpu in os.sched_getaffinity(0):
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with (
                open(topology + "physical_package_id") as package,
                open(topology + "core_id") as core,
            ):
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:
            return usable
    return max(1, min(usable, len(cores)))


def worker_bytes(model_bytes: int) -> int:
    """A deliberately generous guess of one worker's peak memory."""
    return WORKER_BASE_BYTES + WEIGHTS_FACTOR * model_bytes


SMALL_MACHINE_BYTES = 4_000_000_000


MAX_WORKERS = 4  # per machine (or cluster node): more, thinner workers stop paying


def workers_for(
    units: int, memory: int | None, model_bytes: int, cap: int | None = MAX_WORKERS
) -> int:
    """The `--jobs` rule, for this machine and for each node of a cluster: 1 where memory
    is small (under 4 GB, or unknown); else one per unit (core, or GPU), as many as fit in
    half the memory, at most `cap`."""
    if memory is None or memory < SMALL_MACHINE_BYTES:
        return 1
    fit = int(0.5 * memory // worker_bytes(model_bytes))
    return max(1, min(units, fit, cap if cap is not None else units))


def default_jobs(model_bytes: int, worker_per_core: bool = True) -> int:
    """workers_for this machine's cores and available memory; 1 for a backend without
    `worker_per_core`. Measured on 2 cores: 2 single-threaded ctranslate2 workers beat 1
    two-threaded one, even one whose short files share batches; one transformers worker beat
    two (docs/batch.md, 'Short files share batches' and 'Measured')."""
    if not worker_per_core:
        return 1
    return workers_for(os.cpu_count() or 1, available_memory_bytes(), model_bytes)


def memory_warning(jobs: int, model_bytes: int) -> str | None:
    """A one-line warning when `jobs` workers will likely not fit in available memory."""
    memory = available_memory_bytes()
    need = jobs * worker_bytes(model_bytes)
    if memory is None or jobs == 1 or need <= 0.8 * memory:
        return None
    fit = max(1, int(0.8 * memory // worker_bytes(model_bytes)))
    return (
        f"--jobs {jobs} loads {jobs} models (about {need / 1e9:.1f} GB) but "
        f"{memory / 1e9:.1f} GB is available: consider --jobs {fit}"
    )
