"""Batch runs into an output folder, for real: a tree of real clips and bad files, resume
through the manifest, worker processes, JSON events, kill -9 and rerun."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path, PurePosixPath

import pytest
from filelock import FileLock

from kvscribe.errors import ExitCode
from kvscribe.inputs import Input, Selection, expand, looks_like_media, output_bases
from tests.conftest import CARDS, CARDS_TEXT, KVSCRIBE, SAMPLE, run_cli, wer

pytestmark = [pytest.mark.model]

# The batch's good files: a real 1.1 s clip (one 30 s window, as the 11 s sample took, and a
# tenth of its decoding): the tests check plumbing, not accuracy.

FAST = ("--beam-size", "1", "-f", "txt,json")  # greedy: the tests check plumbing, not accuracy
GOOD = [
    "a.wav",
    "talks/a.wav",  # the same name in another folder
    "talks/day 2/ünïcode talk.flac",
    "talks/day 2/-starts-with-dash.mp3",
    "talks/day 2/dots..in..name.ogg",
    "same/x.wav",
    "same/x.flac",  # same stem, same folder
    "no-extension-recording",  # audio found by its bytes
]
BAD = {
    "bad/empty.wav": 4,
    "bad/notes.wav": 4,
    "bad/truncated.wav": 4,
    "bad/corrupt.flac": 4,
    "bad/header_only.wav": 4,
}


@pytest.fixture(scope="module")
def clip_as(tmp_path_factory) -> dict[str, Path]:
    """CARDS in each container the tree holds, by suffix (encoded as tests/media.py does)."""
    from kvscribe.audio import load_audio
    from tests import media

    kinds = ("flac", "mp3", "ogg")
    made = media.encoded(load_audio(CARDS), tmp_path_factory.mktemp("clip"), "clip", kinds)
    return {".wav": CARDS, **{f".{kind}": path for kind, path in made.items()}}


@pytest.fixture(scope="module")
def tree(derived, clip_as, tmp_path_factory) -> Path:
    """A folder of real clips and bad files; also an ignored text file and a hidden file."""
    root = tmp_path_factory.mktemp("batch") / "recordings"
    for name in GOOD:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(clip_as.get(Path(name).suffix, CARDS), target)
    bad = {"empty": "empty", "notes": "not_audio", "truncated": "truncated_wav"}
    bad |= {"corrupt": "corrupt_flac", "header_only": "header_only"}
    for name in BAD:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(derived[bad[Path(name).stem]], target)
    (root / "README.txt").write_text("not audio, not an input")
    (root / ".hidden.wav").write_bytes(SAMPLE.read_bytes())
    return root


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def _outputs(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".kvscribe" not in p.parts
    }


@pytest.fixture(scope="module")
def first_run(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("first") / "out"
    result = run_cli(tree, "-o", out, "--recursive", "--jobs", "2", "--json", *FAST)
    return out, result


@pytest.mark.slow
def test_batch_mirrors_the_tree_and_reports_each_bad_file_once(tree, first_run):
    out, result = first_run
    assert result.code == ExitCode.SOME_FAILED, result.stderr
    events = _events(result.stdout)
    done = {Path(e["path"]).relative_to(tree).as_posix() for e in events if e["event"] == "done"}
    failed = {
        Path(e["path"]).relative_to(tree).as_posix(): e for e in events if e["event"] == "failed"
    }
    assert done == set(GOOD)
    assert {k: e["exit_code"] for k, e in failed.items()} == BAD
    started = {
        Path(e["path"]).relative_to(tree).as_posix() for e in events if e["event"] == "started"
    }
    assert started == done | (set(BAD) - {"bad/empty.wav"})  # empty: refused before any work
    for name in BAD:
        assert sum(name in line for line in result.stderr.splitlines()) == 1, name
    expected = {
        "a",
        "talks/a",
        "talks/day 2/ünïcode talk",
        "talks/day 2/-starts-with-dash",
        "talks/day 2/dots..in..name",
        "same/x.wav",
        "same/x.flac",
        "no-extension-recording",
    }
    assert set(_outputs(out)) == {f"{b}.{fmt}" for b in expected for fmt in ("txt", "json")}
    transcript = json.loads((out / "talks/day 2/ünïcode talk.json").read_text())
    assert wer(CARDS_TEXT, transcript["text"]) <= 0.15
    assert not list(out.rglob("*.part"))


def test_rerun_does_no_work_and_lists_the_same_failures(tree, first_run):
    out, _ = first_run
    result = run_cli(tree, "-o", out, "--recursive", "--jobs", "2", "--json", *FAST)
    assert result.code == ExitCode.SOME_FAILED
    events = _events(result.stdout)
    assert not [e for e in events if e["event"] in ("started", "done")]
    assert len([e for e in events if e["event"] == "skipped"]) == len(GOOD)
    failed = sorted(
        Path(e["path"]).relative_to(tree).as_posix() for e in events if e["event"] == "failed"
    )
    assert failed == sorted(BAD)
    assert result.stderr.count("failed before, unchanged") == len(BAD) - 1  # empty.wav: at once


@pytest.mark.slow
def test_changed_input_and_forced_rerun_are_redone(tree, clip_as, tmp_path):
    folder = tmp_path / "in"
    shutil.copytree(tree / "same", folder)
    out = tmp_path / "out"
    one = ("--jobs", "1", *FAST)  # in this process: what is redone is the claim, not workers
    assert run_cli(folder, "-o", out, *one).code == 0
    shutil.copy(clip_as[".mp3"], folder / "x.wav")  # new bytes under the old name
    os.utime(folder / "x.flac")  # touched only: same bytes
    events = _events(run_cli(folder, "-o", out, "--json", *one).stdout)
    assert [(e["event"], Path(e["path"]).name) for e in events if e["event"] != "started"] == [
        ("skipped", "x.flac"),
        ("done", "x.wav"),
    ]
    forced = _events(run_cli(folder, "-o", out, "--json", "--force", *one).stdout)
    assert sorted(Path(e["path"]).name for e in forced if e["event"] == "done") == [
        "x.flac",
        "x.wav",
    ]


@pytest.mark.slow
def test_changed_options_redo_and_new_formats_are_written(tmp_path):
    out = tmp_path / "out"
    assert run_cli(CARDS, "-o", out, "-f", "txt", "--beam-size", "1").code == 0
    again = run_cli(CARDS, "-o", out, "-f", "txt", "--beam-size", "1", "--json")
    assert [e["event"] for e in _events(again.stdout)] == ["skipped"]
    more = run_cli(CARDS, "-o", out, "-f", "txt,srt", "--beam-size", "1", "--json")
    assert [e["event"] for e in _events(more.stdout)] == ["started", "done"]
    beam = run_cli(CARDS, "-o", out, "-f", "txt,srt", "--beam-size", "2", "--json")
    assert [e["event"] for e in _events(beam.stdout)] == ["started", "done"]
    assert (out / f"{CARDS.stem}.srt").is_file()


def _finished_records(manifest: Path) -> int:
    """Inputs done or failed (a "writing" record only names outputs about to be written)."""
    return sum('"status": "writing"' not in line for line in manifest.read_text().splitlines())


@pytest.mark.slow
def test_kill_9_mid_batch_then_rerun_equals_an_uninterrupted_run(tree, first_run, tmp_path):
    reference, _ = first_run
    out = tmp_path / "out"
    argv = [KVSCRIBE, tree, "-o", out, "--recursive", "--jobs", "2", "-q", *FAST]
    proc = subprocess.Popen(argv, start_new_session=True, stderr=subprocess.DEVNULL)
    manifest = out / ".kvscribe" / "manifest.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if manifest.exists() and _finished_records(manifest) >= 5:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole batch, workers too: a power cut
    proc.wait()
    done_before = _finished_records(manifest)
    assert 0 < done_before < len(GOOD) + len(BAD), "the kill did not land mid-batch"
    rerun = run_cli(tree, "-o", out, "--recursive", "--jobs", "2", "--json", *FAST)
    assert rerun.code == ExitCode.SOME_FAILED
    assert _outputs(out) == _outputs(reference)  # byte for byte, no partial or extra file
    assert not list(out.rglob("*.part"))


@pytest.mark.slow
def test_files_from_stdin_like_find(tree, tmp_path):
    listed = "\n".join(str(tree / name) for name in ("a.wav", "talks/a.wav", "bad/notes.wav"))
    proc = subprocess.run(
        # --jobs 1: in this process, not two workers: reading the list is the claim
        [KVSCRIBE, "--files-from", "-", "-o", tmp_path / "out", "--jobs", "1", "--json", *FAST],
        input=listed + "\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == ExitCode.SOME_FAILED, proc.stderr
    events = _events(proc.stdout)
    assert sorted(e["event"] for e in events) == [
        "done",
        "done",
        "failed",
        "started",
        "started",
        "started",
    ]
    assert set(_outputs(tmp_path / "out")) == {"a.txt", "a.json", "talks/a.txt", "talks/a.json"}


def test_glob_includes_and_excludes(tree, tmp_path):
    selection = Selection(recursive=True, globs=("*.wav", "!bad/*"))
    found = [e.path.relative_to(tree).as_posix() for e in expand([tree], selection)]
    assert found == ["a.wav", "same/x.wav", "talks/a.wav"]
    flat = [e.path.name for e in expand([tree], Selection())]
    assert flat == ["a.wav", "no-extension-recording"]  # top level only; README.txt ignored


def test_an_output_folder_in_use_is_refused(tmp_path):
    out = tmp_path / "out"
    (out / ".kvscribe").mkdir(parents=True)
    with FileLock(out / ".kvscribe" / "lock"):  # another run holds it (any OS)
        result = run_cli(SAMPLE, "-o", out)
    assert result.code == ExitCode.USAGE and "another kvscribe run" in result.stderr


def test_output_paths_stay_inside_the_output_folder(tmp_path):
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    names = ["x.wav", "-x.wav", "..x.wav", "x..wav", "ü x.wav"]
    for name in names:
        (inner / name).write_bytes(b"")
    climbing = [Input(inner / ".." / "b" / name) for name in names]
    bases = output_bases(climbing)
    assert all(".." not in base.parts and not base.is_absolute() for base in bases.values())
    assert sorted(str(b) for b in bases.values()) == sorted(PurePosixPath(n).stem for n in names)
    outside = Input(tmp_path / "other.wav")
    mixed = output_bases([Input(inner / "x.wav"), outside])
    assert mixed[inner / "x.wav"] == PurePosixPath("a/b/x") and mixed[outside.path].name == "other"
    # A name with no stem keeps its extension (it stopped the whole batch with exit 2).
    (inner / "..wav").write_bytes(b"")
    assert output_bases([Input(inner / "..wav")])[inner / "..wav"] == PurePosixPath("..wav")
    # x.mp3 kept whole is x.mp3.wav's stem: both wrote x.mp3.txt, and one transcript was lost.
    three = [Input(inner / name) for name in ("x.wav", "x.mp3", "x.mp3.wav")]
    assert sorted(map(str, output_bases(three).values())) == ["x.mp3", "x.mp3.wav", "x.wav"]


def test_media_is_recognised_by_content(derived, tmp_path):
    for key in ("flac", "mp3", "ogg", "m4a"):
        blind = tmp_path / f"blind-{key}"
        shutil.copy(derived[key], blind)
        assert looks_like_media(blind), key
    text = tmp_path / "notes"
    text.write_text("Minutes of the meeting")
    assert not looks_like_media(text)


class _Collect:
    """A BatchListener that keeps what it is told."""

    def __init__(self):
        self.results, self.skipped = [], []

    def planned(self, todo, skipped):
        self.skipped = [path.name for path, _ in skipped]

    def started(self, task): ...

    def retrying(self, task, attempt, attempts, reason): ...

    def progress(self, task, seconds_done, duration, segment): ...

    def finished(self, result):
        self.results.append(result)

    def failed_input(self, entry): ...


def _two_files(tmp_path: Path):
    """A folder of two copies of CARDS, and the options of a greedy -f txt run of it."""
    from kvscribe.options import TranscribeOptions

    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    for name in ("a.wav", "b.wav"):
        shutil.copy(CARDS, folder / name)
    return folder, TranscribeOptions(
        inputs=(folder,), output_dir=out, formats=("txt",), beam_size=1
    )


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names fds through /proc")
def test_a_manifest_that_cannot_be_written_stops_the_run_in_one_line(tmp_path, monkeypatch):
    from kvscribe import batch

    folder, options = _two_files(tmp_path)
    real_fsync = os.fsync

    def disk_full_for_the_manifest(fd):  # ENOSPC at the OS boundary, for the manifest only
        if os.readlink(f"/proc/self/fd/{fd}").endswith("manifest.jsonl"):
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", disk_full_for_the_manifest)
    summary = batch.Batch(options, _Collect()).run(expand([folder]))
    assert summary.fatal is not None and summary.exit_code == ExitCode.SOME_FAILED
    line = summary.fatal.one_line()  # was an internal error
    assert "manifest.jsonl: write failed: No space left on device" in line and "rerun" in line
    assert summary.done == 0  # the first record failed: the run stopped there
    monkeypatch.setattr(os, "fsync", real_fsync)
    again = batch.Batch(options, _Collect()).run(expand([folder]))
    assert again.exit_code == ExitCode.OK and again.done == 2


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names fds through /proc")
def test_a_full_disk_fails_that_file_only_and_a_rerun_retries_it(tmp_path, monkeypatch):
    from kvscribe import batch

    folder, options = _two_files(tmp_path)
    out = options.output_dir
    real_fsync = os.fsync

    def disk_full_for_b(fd):  # fault injection at the OS boundary: ENOSPC for b's output only
        if "/.b.txt." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", disk_full_for_b)
    first = _Collect()
    summary = batch.Batch(options, first).run(expand([folder]))
    assert (summary.done, summary.failed, summary.exit_code) == (1, 1, ExitCode.SOME_FAILED)
    failure = next(r.error for r in first.results if r.error is not None)
    assert "No space left on device" in failure.one_line() and "b.txt" in failure.one_line()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["a.txt"]
    monkeypatch.setattr(os, "fsync", real_fsync)
    again = _Collect()
    summary = batch.Batch(options, again).run(expand([folder]))
    assert again.skipped == ["a.wav"] and [r.task.path.name for r in again.results] == ["b.wav"]
    assert summary.exit_code == ExitCode.OK and (out / "b.txt").is_file()


def test_a_folder_that_gives_nothing_says_why(tmp_path):
    """A --glob that leaves every file out says so (it said the folder held no audio); the
    --recursive hint only where there are folders below."""
    (tmp_path / "flat").mkdir()
    shutil.copy(SAMPLE, tmp_path / "flat" / "a.wav")
    (tmp_path / "empty").mkdir()
    (tmp_path / "deep" / "inner").mkdir(parents=True)
    globbed = expand([tmp_path / "flat"], Selection(globs=("*.mp3",)))[0].error.one_line()
    assert "no audio file matches --glob (1 left out)" in globbed and "*.mp3" in globbed
    empty = expand([tmp_path / "empty"])[0].error.one_line()
    assert "holds no audio files" in empty and "--recursive" not in empty
    assert "add --recursive" in expand([tmp_path / "deep"])[0].error.one_line()
