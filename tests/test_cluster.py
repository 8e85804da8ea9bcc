"""`--cluster`, for real: a two-node Ray cluster (1 CPU each, token authentication) on
loopback only, inside network and PID namespaces the test makes (tests/cluster_local.py),
the kvscribe CLI as its driver (tests/cluster_scenarios.py). Outputs are compared byte
for byte with a `--jobs 1` run of the same folder: eval clips in nested folders, one long
recording, and bad files (a truncated WAV, a text file named .wav, an empty file)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvscribe.errors import ExitCode
from tests.cluster_local import namespace_command, namespace_problem
from tests.conftest import EVAL_DIR, ROOT, SAMPLE, run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.eval]

# Greedy: the tests check plumbing, not accuracy. One engine thread everywhere: the cluster's
# nodes have 1 CPU each while `--jobs 1` would take every core, and equal bytes need equal
# settings. (What did change a clip's words between the two, "1-2-345-678910." vs
# "1-2-3-4-5-6-7-8-9-10.", was numpy's BLAS thread count: now one in every process.)
FAST = ("--beam-size", "1", "--threads", "1", "-f", "txt,json")
HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install -e '.[ray]')")


@pytest.fixture(scope="module")
def namespaces():
    problem = namespace_problem() if HAS_RAY else None
    if problem is not None:
        pytest.skip(f"no loopback-only namespace for a Ray cluster: {problem}")


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """3 eval clips in nested folders, a 50 s recording first in line (so a file is surely
    in flight when something is killed: about 3 s at these settings), and three bad
    files. Each clip costs every run a whole encoder window: three (one per folder, the
    counting clip whose words once differed between runs among them) still fill a parcel
    with short files beside the long one when shipped."""
    root = tmp_path_factory.mktemp("cluster") / "recordings"
    clips = sorted(p for p in EVAL_DIR.glob("*.wav") if "longform" not in p.name)[:3]
    folders = ["2024/jan", "2024/feb/interviews", "2025"]
    for index, clip in enumerate(clips):
        target = root / folders[index % len(folders)] / clip.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(clip, target)
    (root / "0-long").mkdir()
    joined = EVAL_DIR.parent / "clips_joined" / "joined_real.wav"
    shutil.copy(joined, root / "0-long" / "lecture.wav")
    bad = root / "bad"
    bad.mkdir()
    raw = clips[0].read_bytes()
    (bad / "truncated.wav").write_bytes(raw[: len(raw) // 2])
    (bad / "notes.wav").write_text("Minutes of the meeting, 3 May.\n" * 20)
    (bad / "empty.wav").write_bytes(b"")
    return root


@pytest.fixture(scope="module")
def reference(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "out"
    result = run_cli(tree, "-o", out, "--recursive", "--jobs", "1", "--json", *FAST)
    assert result.code == ExitCode.SOME_FAILED, result.stderr
    return out, result.code


def _outputs(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".kvscribe" not in p.parts
    }


def _statuses(folder: Path) -> dict[str, tuple]:
    lines = (folder / ".kvscribe" / "manifest.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return {r["input"]: (r["status"], r["exit_code"], sorted(r["outputs"])) for r in records}


@pytest.fixture(scope="module")
def cluster_runs(namespaces, tree, tmp_path_factory) -> tuple[Path, dict]:
    """Every scenario, one after the other on one local cluster (its start and stop cost
    about 30 s): the folder under which each wrote OUT/SCENARIO, and each one's runs."""
    if not HAS_RAY:
        pytest.skip("ray is not installed (pip install -e '.[ray]')")
    base = tmp_path_factory.mktemp("cluster-runs")
    result = base / "runs.json"
    argv = [sys.executable, str(ROOT / "tests" / "cluster_local.py"), "--"]
    argv += [sys.executable, str(ROOT / "tests" / "cluster_scenarios.py"), ",".join(SCENARIOS)]
    argv += [str(tree), str(base / "out"), str(result), *FAST]
    done = subprocess.run(
        namespace_command(argv), capture_output=True, text=True, timeout=1800, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return base / "out", json.loads(result.read_text())


SCENARIOS = ("same", "shared", "kill-actor", "kill-driver", "term-driver")
INPUTS, GOOD = 7, 4  # the tree's files; those that transcribe (the clips and the recording)


def _same_as_jobs_1(out: Path, reference) -> None:
    ref_out, _ = reference
    assert _outputs(out) == _outputs(ref_out)  # byte for byte, no partial or extra file
    assert _statuses(out) == _statuses(ref_out)
    assert not list(out.rglob("*.part"))


@needs_ray
@pytest.mark.slow
def test_cluster_outputs_from_shared_storage_equal_jobs_1(tree, reference, cluster_runs):
    out, run = cluster_runs[0] / "same", cluster_runs[1]["same"]["run"]
    assert run["code"] == reference[1], run["stderr"]
    assert "Traceback" not in run["stderr"]
    _same_as_jobs_1(out, reference)
    events = [json.loads(line) for line in run["stdout"].splitlines()]  # stdout: JSON only
    assert sum(e["event"] == "done" for e in events) == GOOD
    assert sum(e["event"] == "started" for e in events) == INPUTS - 1  # empty.wav: refused at once
    for name in ("truncated.wav", "notes.wav", "empty.wav"):
        assert sum(name in line for line in run["stderr"].splitlines()) == 1, name
    _segments_reached_the_driver(tree, out, run["stderr"].splitlines())


@pytest.fixture(scope="module")
def shared_reference(tree, tmp_path_factory):
    """`--jobs 1` with two engine threads: its short files share batches."""
    out = tmp_path_factory.mktemp("shared-reference") / "out"
    result = run_cli(tree, "-o", out, "--recursive", "--jobs", "1", *FAST, "--threads", "2")
    assert result.code == ExitCode.SOME_FAILED, result.stderr
    return out, result.code


@needs_ray
@pytest.mark.slow
def test_shipped_files_that_share_batches_go_in_parcels_and_equal_jobs_1(
    shared_reference, cluster_runs
):
    """Actors with two threads each share batches: the driver hands them parcels of files
    (the actor decodes each parcel's short files side by side), their audio shipped through
    Ray's object store, and the outputs and the manifest are `--jobs 1`'s byte for byte,
    bad files' failures included."""
    out, run = cluster_runs[0] / "shared", cluster_runs[1]["shared"]["run"]
    assert run["code"] == shared_reference[1], run["stderr"]
    assert "Traceback" not in run["stderr"]
    _same_as_jobs_1(out, shared_reference)
    events = [json.loads(line) for line in run["stdout"].splitlines()]
    assert sum(e["event"] == "done" for e in events) == GOOD
    for name in ("truncated.wav", "notes.wav", "empty.wav"):
        assert sum(name in line for line in run["stderr"].splitlines()) == 1, name
    stats = json.loads(Path(f"{out}.stats.json").read_text())
    assert any("side by side" in note for note in stats["notes"]), stats["notes"]


def _segments_reached_the_driver(tree: Path, out: Path, lines: list[str]) -> None:
    """Actors send each segment as it is final; the driver prints it after its file's path."""
    from kvscribe.writers import render_console_line

    outputs = sorted(out.rglob("*.json"))
    assert len(outputs) == GOOD
    for written in outputs:
        source = tree / written.relative_to(out).with_suffix(".wav")
        for s in json.loads(written.read_text())["segments"]:
            assert f"{source} {render_console_line(s['start'], s['end'], s['text'])}" in lines


@needs_ray
@pytest.mark.slow
def test_an_actor_killed_mid_file_is_replaced_and_its_file_retried(reference, cluster_runs):
    out, result = cluster_runs[0] / "kill-actor", cluster_runs[1]["kill-actor"]
    run = result["run"]
    assert result["killed_pid"] is not None, "no actor was seen at work"
    assert "retrying it (attempt 2 of 3)" in run["stderr"], run["stderr"]
    events = [json.loads(line) for line in run["stdout"].splitlines()]
    retries = [e for e in events if e["event"] == "retrying"]
    assert len(retries) == 1 and (retries[0]["attempt"], retries[0]["attempts"]) == (2, 3)
    assert retries[0]["reason"], retries[0]  # why the worker was lost, as Ray said it
    assert run["code"] == reference[1], run["stderr"]
    _same_as_jobs_1(out, reference)  # every good file done, as with --jobs 1


@needs_ray
@pytest.mark.slow
def test_driver_killed_then_rerun_equals_jobs_1(reference, cluster_runs):
    out, result = cluster_runs[0] / "kill-driver", cluster_runs[1]["kill-driver"]
    assert 0 < result["records_at_kill"] < INPUTS, "the kill did not land mid-batch"
    rerun = result["rerun"]
    assert rerun["code"] == reference[1], rerun["stderr"]
    events = [json.loads(line) for line in rerun["stdout"].splitlines()]
    assert any(e["event"] == "skipped" for e in events)  # what was recorded is not redone
    _same_as_jobs_1(out, reference)


@needs_ray
@pytest.mark.slow
def test_sigterm_to_the_driver_stops_the_batch_as_ctrl_c_does(cluster_runs):
    """`ray.init` sets its own SIGTERM handler (exit 15 at once, no summary); a cluster run
    stops as any batch does: its summary, the manifest kept, status 143, no actor left."""
    out, run = cluster_runs[0] / "term-driver", cluster_runs[1]["term-driver"]["run"]
    assert run["code"] == ExitCode.TERMINATED, run["stderr"]
    assert "by SIGTERM (rerun to resume)" in run["stderr"]  # the summary's "stopped" row
    assert "Traceback" not in run["stderr"]
    assert 0 < len(_statuses(out)) < INPUTS  # what was done stays recorded for a rerun
    assert not list(out.rglob("*.part"))
    assert cluster_runs[1]["term-driver"]["actors_after"] == []


# -- without a cluster ---------------------------------------------------------------------


def test_without_ray_cluster_is_one_line_naming_the_extra(tmp_path):
    shim = tmp_path / "no-ray"  # fault injection: `import ray` fails as if not installed
    shim.mkdir()
    missing = "raise ModuleNotFoundError(\"No module named 'ray'\", name='ray')\n"
    (shim / "ray.py").write_text(missing)
    env = {"PYTHONPATH": str(shim)}
    result = _cli_with_env(env, SAMPLE, "-o", tmp_path / "out", "--cluster", "auto")
    assert result.returncode == ExitCode.BACKEND_UNAVAILABLE, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'kvscribe[ray]'" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--cluster", "auto"), "--cluster"),  # no -o: a cluster run is a batch
        (("-o", "OUT", "--cluster", "auto", "--jobs", "2"), "--cluster"),
        (("-o", "OUT", "--ship-audio"), "--ship-audio"),
        (("-o", "OUT", "--cluster", "http://head"), "--cluster"),
    ],
)
def test_cluster_flag_misuse_is_a_usage_error(args, flag, tmp_path):
    args = tuple(str(tmp_path / "out") if a == "OUT" else a for a in args)
    result = run_cli(SAMPLE, *args)
    assert result.code == ExitCode.USAGE, result.stderr
    assert result.stderr.strip().startswith(f"kvscribe: error: {flag}:"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@needs_ray
def test_an_address_nobody_answers_fails_at_once_in_one_line(tmp_path):
    result = run_cli(SAMPLE, "-o", tmp_path / "out", "--cluster", "127.0.0.1:9", timeout=60)
    assert result.code == ExitCode.BACKEND_UNAVAILABLE, result.stderr
    assert "nothing answers at 127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # refused before any work: no folder left


def test_slots_per_node_follow_the_jobs_rule():
    from kvscribe.cluster.capacity import Node, plan

    small = Node("a", "10.0.0.1", cpus=8, memory=3_000_000_000, gpus=0)
    big = Node("b", "10.0.0.2", cpus=8, memory=64_000_000_000, gpus=2)
    head = Node("h", "10.0.0.3", cpus=0, memory=64_000_000_000, gpus=0)
    slots = plan([small, big, head], 75_000_000, wants_gpu=False)
    assert [s.node.id for s in slots] == ["a", "b", "b", "b", "b"]  # first slots spread
    assert [s.threads for s in slots] == [8, 2, 2, 2, 2] and {s.gpus for s in slots} == {0}
    on_gpus = plan([small, big], 75_000_000, wants_gpu=True)
    assert [(s.node.id, s.gpus) for s in on_gpus] == [("b", 0.5)] * 4
    # a backend whose one worker uses every core better: one slot per node, or per GPU
    whole = plan([small, big, head], 75_000_000, wants_gpu=False, per_core=False)
    assert [(s.node.id, s.threads) for s in whole] == [("a", 8), ("b", 8)]
    whole = plan([small, big], 75_000_000, wants_gpu=True, per_core=False)
    assert [(s.node.id, s.threads, s.gpus) for s in whole] == [("b", 4, 1.0)] * 2


def test_a_shipped_parcel_holds_short_files_and_a_long_file_goes_alone(tmp_path):
    """Parcels are cut by bytes when the driver ships audio: eight 1 MB files go together,
    files of 40 MB one at a time (sparse files: only their sizes matter)."""

    from kvscribe.cluster.executor import take_parcel

    short, long = _attempts(tmp_path, 2**20, 10), _attempts(tmp_path, 40 * 2**20, 3)
    assert len(take_parcel(short, 8, ship=True)) == 8 and len(short) == 2
    assert [len(take_parcel(long, 8, ship=True)) for _ in range(3)] == [1, 1, 1]
    assert len(take_parcel(_attempts(tmp_path, 40 * 2**20, 3), 8, ship=False)) == 3  # in place


def test_a_lost_parcels_files_are_retried_one_at_a_time(tmp_path):
    """A file that kills its worker (out of memory, a crash) must not take its parcel's good
    files down with it after three losses: retried, each goes in a parcel of its own."""
    from kvscribe.cluster.executor import take_parcel

    queue = _attempts(tmp_path, 2**20, 6)
    for attempt in list(queue)[:3]:
        attempt.alone = True  # what a lost parcel's files come back as (Run._retry)
    for ship in (True, False):
        line = queue.copy()
        sizes = [len(take_parcel(line, 8, ship)) for _ in range(4)]
        assert sizes == [1, 1, 1, 3], ship


def test_a_node_without_the_drivers_storage_says_so(tmp_path):
    """Without --ship-audio each node reads the driver's paths; where a node lacks the
    mount, "no such file (check the path)" for a file the user can see would mislead."""
    from kvscribe.audio import check_readable
    from kvscribe.batch.worker import Result, Task
    from kvscribe.cluster.executor import storage_not_shared
    from kvscribe.errors import InputNotFoundError

    here, gone = tmp_path / "here.wav", tmp_path / "gone.wav"
    here.write_bytes(SAMPLE.read_bytes())
    with pytest.raises(InputNotFoundError) as missing:  # what a node without the mount says
        check_readable(tmp_path / "elsewhere" / "here.wav")
    seen = storage_not_shared(Result(Task(here, "here", None), error=missing.value), "10.0.0.2")
    assert "Ray worker on 10.0.0.2 finds no file" in seen.error.one_line()
    assert "--ship-audio" in seen.error.hint and seen.error.subject == str(here)
    truly = storage_not_shared(Result(Task(gone, "gone", None), error=missing.value), "10.0.0.2")
    assert truly.error is missing.value  # missing for the driver too: the usual line


def test_actors_take_the_drivers_settings_but_not_the_servers_key():
    from kvscribe.cluster.executor import actor_env

    environ = {"KVSCRIBE_CACHE_DIR": "/c", "HF_HUB_OFFLINE": "1", "PATH": "/bin"}
    environ["KVSCRIBE_API_KEY"] = "sk-secret"  # what `kvscribe serve` asks clients for
    assert actor_env(environ) == {"KVSCRIBE_CACHE_DIR": "/c", "HF_HUB_OFFLINE": "1"}


def _attempts(folder: Path, size: int, count: int):
    """`count` files of `size` bytes (sparse: only their sizes matter), as attempts."""
    from collections import deque

    from kvscribe.batch.worker import Task
    from kvscribe.cluster.executor import Attempt

    found = deque()
    for number in range(count):
        path = folder / f"{size}-{number}.wav"
        with path.open("wb") as out:
            out.truncate(size)
        found.append(Attempt(Task(path, path.stem, None)))
    return found


@needs_ray
def test_a_cluster_on_another_ray_version_is_one_line_naming_both(monkeypatch):
    """Ray refuses a driver whose Ray or Python differs from the cluster's with a
    RuntimeError; fault injection (one Ray version is installed here): `ray.init` raises
    what Ray 2.60 raises then."""
    import ray

    from kvscribe.cluster import connect
    from kvscribe.errors import BackendUnavailableError

    def mismatch(**kwargs):
        raise RuntimeError("Version mismatch: The cluster was started with:\n Ray: 2.59.0")

    monkeypatch.setattr(ray, "init", mismatch)
    with pytest.raises(BackendUnavailableError) as raised:
        connect._init(ray, "10.0.0.1:6379", "10.0.0.1:6379")
    line = raised.value.one_line()
    assert "cannot join 10.0.0.1:6379: Version mismatch" in line, line
    assert ray.__version__ in raised.value.hint


def _cli_with_env(extra: dict, *args) -> subprocess.CompletedProcess:
    import os

    from tests.conftest import KVSCRIBE

    return subprocess.run(
        [str(KVSCRIBE), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **extra},
    )
