"""Each test's CPU seconds, for whoever trims the suite (benchmarks/suite_cpu.py).

With KVSCRIBE_TEST_CPU_LOG=FILE, every test (its setup, call and teardown) appends one
JSON line to FILE: its node id, the worker, when it began, wall seconds, the CPU seconds
its worker process and the child processes it reaped spent meanwhile (user + system), and
of those the children's alone (the `kvscribe` and other processes it ran). The suite runs
on every core, so a test's wall time says as much about what ran beside it as about the
test; its CPU seconds are its own. A module fixture's cost falls on the module's first
test (its setup) and last (its teardown reaps what it started); sum by module to compare.
Without the variable nothing is measured."""

from __future__ import annotations

import json
import os
import time

import pytest

from kvscribe.machine.capacity import process_cpu_seconds  # with the children it reaped

LOG = os.environ.get("KVSCRIBE_TEST_CPU_LOG")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not LOG:
        yield
        return
    cpu, wall, start = process_cpu_seconds(), time.perf_counter(), time.time()
    children = _children_cpu_seconds()
    yield
    line = {
        "test": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "start": round(start, 3),  # the epoch second it began: the workers' timeline
        "wall": round(time.perf_counter() - wall, 3),
        "cpu": round(process_cpu_seconds() - cpu, 3),
        "children_cpu": round(_children_cpu_seconds() - children, 3),
    }
    with open(LOG, "a", encoding="utf-8") as log:  # one short write a line: workers share it
        log.write(json.dumps(line) + "\n")


def _children_cpu_seconds() -> float:
    times = os.times()
    return times.children_user + times.children_system
