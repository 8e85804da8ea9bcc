"""tests/cpu_log.py and benchmarks/suite_cpu.py: each test's CPU seconds, summed by module."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

BUSY_AND_IDLE = """
import subprocess, sys, time

def test_busy():
    end = time.process_time() + 0.4
    while time.process_time() < end:
        pass

def test_busy_child():
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.4\\n"
                    "while time.process_time() < end: pass"], check=True)

def test_idle():
    time.sleep(0.4)
"""


def test_each_test_logs_the_cpu_it_and_its_children_spent(tmp_path):
    (tmp_path / "test_probe.py").write_text(BUSY_AND_IDLE)
    log = tmp_path / "cpu.jsonl"
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    argv += ["--rootdir", str(tmp_path), "-p", "tests.cpu_log", str(tmp_path / "test_probe.py")]
    env = {**os.environ, "KVSCRIBE_TEST_CPU_LOG": str(log), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line["test"].split("::")[1]: line for line in map(json.loads, log.open())}
    assert set(lines) == {"test_busy", "test_busy_child", "test_idle"}
    assert lines["test_busy"]["cpu"] >= 0.35 and lines["test_busy_child"]["cpu"] >= 0.35
    # The child's CPU is told apart from the worker's own.
    assert lines["test_busy_child"]["children_cpu"] >= 0.35
    assert lines["test_busy"]["children_cpu"] < 0.05
    assert lines["test_idle"]["cpu"] < 0.2 and lines["test_idle"]["wall"] >= 0.35
    assert lines["test_idle"]["start"] >= lines["test_busy"]["start"] + 0.35  # run in order


def test_modules_are_summed_costliest_first():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from suite_cpu import by_module

    lines = [
        {"test": "tests/a.py::x", "cpu": 1.0, "children_cpu": 0.25, "wall": 2.0},
        {"test": "tests/b.py::y", "cpu": 3.0, "children_cpu": 2.0, "wall": 1.0},
        {"test": "tests/a.py::z[1]", "cpu": 0.5, "children_cpu": 0.5, "wall": 0.5},
    ]
    assert by_module(lines) == [
        {"module": "tests/b.py", "tests": 1, "cpu": 3.0, "children_cpu": 2.0, "wall": 1.0},
        {"module": "tests/a.py", "tests": 2, "cpu": 1.5, "children_cpu": 0.75, "wall": 2.5},
    ]


def test_each_worker_ends_when_its_last_test_does():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from suite_cpu import timeline

    lines = [
        {"test": "tests/a.py::x", "worker": "gw0", "start": 100.0, "wall": 5.0, "cpu": 4.0},
        {"test": "tests/a.py::y", "worker": "gw0", "start": 105.0, "wall": 50.0, "cpu": 9.0},
        {"test": "tests/b.py::z", "worker": "gw1", "start": 101.0, "wall": 20.0, "cpu": 20.0},
    ]
    assert timeline(lines) == [
        {"worker": "gw1", "ends": 21.0, "busy": 20.0, "cpu": 20.0},
        {"worker": "gw0", "ends": 55.0, "busy": 55.0, "cpu": 13.0},
    ]
    assert timeline([{key: value for key, value in lines[0].items() if key != "start"}]) == []


def test_the_report_tells_the_processes_tests_started_from_the_workers():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from suite_cpu import _markdown, by_module

    lines = [
        {"test": "tests/a.py::x", "cpu": 4.0, "children_cpu": 3.0, "wall": 5.0},
        {"test": "tests/b.py::y", "cpu": 6.0, "children_cpu": 0.0, "wall": 6.0},
    ]
    meta = {"source": "a log", "tests": 2, "pytest_exit": 0, "wall_seconds": 11.0}
    meta |= {"cpu_seconds": 10.0, "children_cpu_seconds": 3.0}
    shown = _markdown(meta, by_module(lines), lines)
    assert "; 3 of them in the processes the tests started and reaped, 7 in the workers" in shown
    assert "| tests/a.py | 1 | 4.0 | 40.0 % | 3.0 | 5.0 |" in shown
    del meta["children_cpu_seconds"]  # a log from before the split
    older = _markdown(meta, by_module(lines), lines)
    assert "in the workers" not in older and "| not in the log |" in older
