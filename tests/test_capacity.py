"""kvscribe/machine/capacity.py: how many batch workers fit the cores and the memory, and
the cores a process may use (the batch's and the transformers backend's defaults)."""

from __future__ import annotations

import os
from pathlib import Path


def test_memory_warning_names_a_number_of_jobs_that_fits(monkeypatch):
    from kvscribe.machine import capacity

    monkeypatch.setattr(capacity, "available_memory_bytes", lambda: 2_000_000_000)
    warning = capacity.memory_warning(8, 75_000_000)
    assert warning is not None and "--jobs 8" in warning and "consider --jobs 3" in warning
    assert capacity.memory_warning(2, 75_000_000) is None


def test_default_jobs_is_one_on_small_machines_and_fits_memory(monkeypatch):
    from kvscribe.machine import capacity

    monkeypatch.setattr(capacity.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(capacity, "available_memory_bytes", lambda: 3_000_000_000)
    assert capacity.default_jobs(75_000_000) == 1
    monkeypatch.setattr(capacity, "available_memory_bytes", lambda: 64_000_000_000)
    assert capacity.default_jobs(75_000_000) == 4
    monkeypatch.setattr(capacity, "available_memory_bytes", lambda: 5_000_000_000)
    assert capacity.default_jobs(1_500_000_000) == 1  # a large model: one fits in half
    monkeypatch.setattr(capacity, "available_memory_bytes", lambda: 64_000_000_000)
    # an engine whose one worker uses every core better (transformers)
    assert capacity.default_jobs(75_000_000, worker_per_core=False) == 1


def test_physical_cores_count_smt_siblings_once_and_follow_a_worker_s_share(monkeypatch):
    """The transformers backend's default threads: torch's rule (physical cores) within
    the cores this process may use; a batch worker's OMP_NUM_THREADS share decides."""
    from kvscribe.machine import capacity

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    physical = capacity.usable_physical_cores()
    assert 1 <= physical <= capacity.usable_cores()
    siblings = set()
    for cpu in os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ():
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        if path.exists():
            siblings.add(path.read_text().strip())
    if siblings:  # one entry per physical core, as its sibling list
        assert physical == len(siblings)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert capacity.usable_physical_cores() == capacity.usable_cores() == 3
