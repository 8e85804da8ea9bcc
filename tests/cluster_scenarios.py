"""The `--cluster` scenarios of tests/test_cluster.py, run inside the loopback-only
namespaces with a local cluster up (tests/cluster_local.py sets RAY_ADDRESS):

    python tests/cluster_scenarios.py SCENARIO[,SCENARIO...] TREE OUT RESULT.json [CLI ARGS...]

Each scenario writes into OUT/SCENARIO, one after the other on the same cluster (a
cluster's start and stop cost about 30 s here).

same          kvscribe TREE -o OUT --cluster auto: each actor reads the files from storage
              the nodes share
shared        the same run with --threads 2, --ship-audio and --stats-json OUT.stats.json:
              each actor's short files share batches, so the driver hands it parcels of
              files, their bytes sent through Ray (a long file goes alone)
kill-actor    `same`'s run; once an actor has been transcribing one file for 1 s, its
              process is killed (kill -9, found by its title ray::KvscribeWorker.transcribe)
kill-driver   `same`'s run, its driver killed (kill -9) after 2 manifest records; a rerun
term-driver   `same`'s run, its driver sent SIGTERM after 2 manifest records (as `timeout`,
              systemd or a scheduler's time limit would); the actors still alive after

RESULT.json maps each scenario to its runs' exit code, stdout, stderr and seconds (and
what was killed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

KVSCRIBE = Path(sys.executable).parent / "kvscribe"
ACTOR_AT_WORK = "ray::KvscribeWorker.transcribe"
TIMEOUT = 300


def _argv(tree: str, out: str, extra: list[str]) -> list[str]:
    return [str(KVSCRIBE), tree, "-o", out, "--recursive", "--cluster", "auto", "--json", *extra]


def _run(argv: list[str]) -> dict:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    return _ran(done.returncode, done.stdout, done.stderr, started)


def _finish(proc: subprocess.Popen, started: float) -> dict:
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    return _ran(proc.returncode, stdout, stderr, started)


def _ran(code: int, stdout: str, stderr: str, started: float) -> dict:
    """A run's outcome, and its seconds (for whoever trims the suite's time)."""
    seconds = round(time.monotonic() - started, 2)
    return {"code": code, "stdout": stdout, "stderr": stderr, "seconds": seconds}


def same(tree: str, out: str, extra: list[str]) -> dict:
    return {"run": _run(_argv(tree, out, extra))}


def shared(tree: str, out: str, extra: list[str]) -> dict:
    """As `same`, the actors' rows on two threads (a later --threads wins): parcels, and the
    audio shipped (one run for both: each cluster run costs the suite 25-40 s)."""
    flags = [*extra, "--threads", "2", "--ship-audio", "--stats-json", out + ".stats.json"]
    return {"run": _run(_argv(tree, out, flags))}


def _actors_at_work() -> list[int]:
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in listing.splitlines() if ACTOR_AT_WORK in line]


def kill_actor(tree: str, out: str, extra: list[str]) -> dict:
    """Kill an actor that has been at one file for a second: mid-file, for real."""
    started = time.monotonic()
    proc = subprocess.Popen(
        _argv(tree, out, extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    at_work_since: dict[int, float] = {}
    killed = None
    deadline = time.monotonic() + TIMEOUT
    while killed is None and proc.poll() is None and time.monotonic() < deadline:
        now = time.monotonic()
        busy = _actors_at_work()
        at_work_since = {pid: at_work_since.get(pid, now) for pid in busy}
        for pid, since in at_work_since.items():
            if now - since >= 1.0:
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.05)
    return {"run": _finish(proc, started), "killed_pid": killed}


def _inputs_finished(manifest: Path) -> int:
    """Records of inputs done or failed: a "writing" one names outputs about to be written
    (tests/test_batch.py counts them so too)."""
    return sum('"status": "writing"' not in line for line in manifest.read_text().splitlines())


def _after_two_records(out: str, proc: subprocess.Popen) -> None:
    """Waits until the run's manifest has 2 inputs' records (or the run ended)."""
    manifest = Path(out) / ".kvscribe" / "manifest.jsonl"
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline:
        if manifest.exists() and _inputs_finished(manifest) >= 2:
            return
        time.sleep(0.02)


def kill_driver(tree: str, out: str, extra: list[str]) -> dict:
    manifest = Path(out) / ".kvscribe" / "manifest.jsonl"
    started = time.monotonic()
    proc = subprocess.Popen(
        _argv(tree, out, extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _after_two_records(out, proc)
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: Ray ends the actors it owned
    proc.wait()
    at_kill = _inputs_finished(manifest) if manifest.exists() else 0
    killed_after = round(time.monotonic() - started, 2)
    rerun = _run(_argv(tree, out, extra))
    return {"records_at_kill": at_kill, "killed_after": killed_after, "rerun": rerun}


def term_driver(tree: str, out: str, extra: list[str]) -> dict:
    started = time.monotonic()
    proc = subprocess.Popen(
        _argv(tree, out, extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _after_two_records(out, proc)
    proc.send_signal(signal.SIGTERM)
    run = _finish(proc, started)
    deadline = time.monotonic() + 10  # the driver kills its actors; Ray reaps them
    while _actors() and time.monotonic() < deadline:
        time.sleep(0.1)
    return {"run": run, "actors_after": _actors()}


def _actors() -> list[int]:
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in listing.splitlines() if "KvscribeWorker" in line]


SCENARIOS = {
    "same": same,
    "shared": shared,
    "kill-actor": kill_actor,
    "kill-driver": kill_driver,
    "term-driver": term_driver,
}


def main() -> None:
    names, tree, out, result, *extra = sys.argv[1:]
    runs = {name: SCENARIOS[name](tree, str(Path(out) / name), extra) for name in names.split(",")}
    Path(result).write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
