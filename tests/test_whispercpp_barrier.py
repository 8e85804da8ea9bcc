"""kvscribe's barrier patch to whisper.cpp (barrier-yield.patch): a ggml thread waiting at a
barrier spins briefly, then yields its core, so whisper-cli's threads on cores busy with
other work do not hold the core the thread they wait for needs.

Unpatched, whisper-cli -t 2 on JFK beside two busy processes on the same 2 cores took
24.1 CPU s against 2.7 for -t 1; patched 2.6 against 2.7
(benchmarks/results/whispercpp_busy_yield.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvscribe.backends.whispercpp import patching
from kvscribe.machine.capacity import process_cpu_seconds
from tests.conftest import SAMPLE
from tests.whispercpp_patches import applied_once

pytestmark = [pytest.mark.whispercpp]

PATCH = "barrier-yield.patch"
# -t 2 on one core beside a busy process may cost this many times -t 1's CPU: this test's
# own measurement, -t 1 beside the busy process too, gave 1.1-1.2x patched and 10x unpatched
# on 2 cores of an AMD EPYC (family 25), run by hand against both builds (not a result file;
# the benchmark's figures are in the module's docstring).
MAX_CPU_RATIO = 3.0


def test_the_patch_applies_to_the_lines_it_was_written_for(tmp_path):
    path, patched = applied_once(PATCH, tmp_path)
    assert path == "ggml/src/ggml-cpu/ggml-cpu.c" and PATCH in patching.PATCHES
    assert "sched_yield();" in patched and "#define GGML_BARRIER_SPINS" in patched


def _pinned(cores: set[int]):
    return lambda: os.sched_setaffinity(0, cores)


def _cpu_seconds(cli: Path, model: Path, threads: int, cores: set[int], busy: bool):
    """whisper-cli's CPU seconds on JFK with `threads`, pinned to `cores`; with `busy`,
    beside one busy-looping process per core there (as a machine doing other work has)."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_pinned(cores))
        for _ in (cores if busy else ())
    ]
    try:
        if spinners:
            time.sleep(0.3)  # the spinners running before whisper-cli starts
        before = process_cpu_seconds()
        argv = [str(cli), "-m", str(model), "-f", str(SAMPLE), "-t", str(threads), "-np"]
        done = subprocess.run(argv, capture_output=True, timeout=300, preexec_fn=_pinned(cores))
        spent = process_cpu_seconds() - before
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "ask not what your country" in done.stdout.decode().lower()
    return spent


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_two_threads_on_a_busy_core_cost_about_what_one_does(whisper_cli, tiny_ggml):
    """One core (any this process may use) with a busy process on it: more threads than
    free cores, as on any machine doing other work. -t 2 costs not many times -t 1's CPU:
    the patched build's waiting thread gives the core back at each barrier."""
    core = {min(os.sched_getaffinity(0))}
    # One thread waits for no other: its CPU seconds are its work's, busy core or not (a
    # little fewer alone, so the bound only tightens); measured alone, it spares a spinner
    # burning as long as whisper-cli runs.
    one = _cpu_seconds(whisper_cli, tiny_ggml, 1, core, busy=False)
    two = _cpu_seconds(whisper_cli, tiny_ggml, 2, core, busy=True)
    assert two <= MAX_CPU_RATIO * one, (two, one)
