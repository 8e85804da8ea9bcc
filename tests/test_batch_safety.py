"""What a batch into an output folder must never do, for real: replace an input or another
input's transcript, miss a replaced recording, delete a file it did not write, lose a
record to a crash, or leave its workers behind (a manifest it cannot write:
tests/test_batch.py, beside the full disk)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kvscribe.errors import ExitCode
from tests.conftest import CARDS, CARDS_TEXT, EVAL_DIR, KVSCRIBE, SAMPLE, run_cli, wer
from tests.processes import alive, workers_of

pytestmark = [pytest.mark.model]

# These tests check what is written where, not accuracy: they read CARDS (tests/conftest.py).
OTHER = EVAL_DIR / "ps_librivox_ss01_0870.wav"  # a second short recording, other words
FAST = ("--beam-size", "1", "-f", "txt", "-q")


def test_an_output_never_replaces_another_input_s_transcript_or_an_input(tmp_path):
    a, b, out = tmp_path / "in" / "a", tmp_path / "in" / "b", tmp_path / "out"
    a.mkdir(parents=True)
    b.mkdir()
    shutil.copy(CARDS, a / "cards.wav")
    shutil.copy(OTHER, b / "cards.wav")
    assert run_cli(a, "-o", out, *FAST).code == 0
    first = (out / "cards.txt").read_text()
    assert wer(CARDS_TEXT, first) <= 0.1
    refused = run_cli(b, "-o", out, *FAST)  # each run given one folder: both are cards.txt
    assert refused.code == ExitCode.SOME_FAILED
    assert f"holds the transcript of {a / 'cards.wav'}" in refused.stderr
    assert "--output-dir" in refused.stderr and refused.stderr.count("\n") == 1
    assert "or --force to replace it" in refused.stderr
    assert (out / "cards.txt").read_text() == first  # nothing lost
    assert run_cli(a, "-o", out, *FAST).code == 0 and (out / "cards.txt").read_text() == first
    # A recording moved to another folder takes its outputs over.
    moved = tmp_path / "in" / "c"
    a.rename(moved)
    assert run_cli(moved, "-o", out, *FAST, "--force").code == 0
    # A recording named like an output, into its own folder: refused, the audio kept.
    named = tmp_path / "named"
    named.mkdir()
    shutil.copy(CARDS, named / "talk.txt")
    refused = run_cli(named / "talk.txt", "-o", named, *FAST)
    assert refused.code == ExitCode.SOME_FAILED and "would replace the input" in refused.stderr
    assert (named / "talk.txt").read_bytes() == CARDS.read_bytes()


def test_a_file_no_run_wrote_is_never_replaced_and_what_kvscribe_wrote_is(tmp_path):
    """The folder as its own output folder, the user's notes `talk.txt` beside `talk.wav`:
    the notes were replaced by the transcript, silently."""
    folder = tmp_path / "talks"
    folder.mkdir()
    shutil.copy(CARDS, folder / "talk.wav")
    (folder / "talk.txt").write_text("my notes")
    refused = run_cli(folder, "-o", folder, *FAST)
    assert refused.code == ExitCode.SOME_FAILED
    assert f"{folder / 'talk.txt'} exists, and no kvscribe run" in refused.stderr
    assert "--force to replace it" in refused.stderr and refused.stderr.count("\n") == 1
    assert (folder / "talk.txt").read_text() == "my notes"
    assert run_cli(folder, "-o", folder, *FAST, "--force").code == 0
    assert wer(CARDS_TEXT, (folder / "talk.txt").read_text()) <= 0.1
    # Its own outputs stay its own: another format, then other options, then the first
    # format again.
    assert run_cli(folder, "-o", folder, "--beam-size", "1", "-f", "srt", "-q").code == 0
    assert run_cli(folder, "-o", folder, *FAST, "--language", "en").code == 0
    # A run that died between a "writing" record and the final one (a kill -9, a power
    # cut): its outputs are kvscribe's, and the input is transcribed again.
    manifest = folder / ".kvscribe" / "manifest.jsonl"
    record = json.loads(manifest.read_text().splitlines()[-1])
    assert record["outputs"] == ["talk.txt", "talk.srt"]
    manifest.write_text(json.dumps(record | {"status": "writing"}) + "\n")
    again = run_cli(folder, "-o", folder, *FAST, "--language", "en", "--json")
    assert again.code == 0, again.stderr
    assert [json.loads(line)["event"] for line in again.stdout.splitlines()][-1] == "done"
    assert json.loads(manifest.read_text().splitlines()[-1])["status"] == "done"


def test_audio_piped_in_again_under_its_name_is_refused_and_replaced_with_force(tmp_path):
    """Its earlier run's input was a spool gone with it: the refusal named the temporary
    file, and --force could not get past it."""
    out = tmp_path / "out"

    def piped(audio: Path, *extra: str) -> subprocess.CompletedProcess:
        argv = [str(KVSCRIBE), "-", "-o", str(out), "--output-name", "talk", *FAST, *extra]
        with audio.open("rb") as stdin:
            return subprocess.run(argv, stdin=stdin, capture_output=True, text=True, timeout=300)

    assert piped(CARDS).returncode == 0
    first = (out / "talk.txt").read_text()
    refused = piped(OTHER)
    assert refused.returncode != 0 and (out / "talk.txt").read_text() == first
    assert "holds the transcript of audio piped in, from an earlier run" in refused.stderr
    assert "or --force to replace it" in refused.stderr
    replaced = piped(OTHER, "--force")
    assert replaced.returncode == 0, replaced.stderr
    assert wer(CARDS_TEXT, (out / "talk.txt").read_text()) > 0.5  # the other recording's


def test_a_file_name_that_is_not_utf_8_is_transcribed_and_resumed(tmp_path):
    """Its bytes as lone surrogates: the manifest and the JSON output could not be written
    (an internal error, no summary, and the same at every rerun)."""
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    name = os.fsdecode(b"caf\xe9")
    shutil.copy(CARDS, folder / f"{name}.wav")
    done = run_cli(folder, "-o", out, "--beam-size", "1", "-f", "json", "-q")
    assert done.code == 0, done.stderr
    document = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    assert document["kvscribe"]["source"] == str(folder / f"{name}.wav")
    assert wer(CARDS_TEXT, document["text"]) <= 0.1
    rerun = run_cli(folder, "-o", out, "--beam-size", "1", "-f", "json", "--json", "-q")
    assert [json.loads(line)["event"] for line in rerun.stdout.splitlines()] == ["skipped"]


def test_a_recording_replaced_with_the_same_size_and_mtime_is_done_again(tmp_path):
    """`cp -p`, `rsync -t` or `mv` of another take of the same length: its inode and ctime
    differ, so its bytes are hashed again."""
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    shutil.copy(CARDS, folder / "x.wav")
    assert run_cli(folder, "-o", out, *FAST).code == 0
    stat = (folder / "x.wav").stat()
    other = bytearray(CARDS.read_bytes())
    samples = other.index(b"data") + 8
    other[samples:] = bytes(len(other) - samples)  # the same header and size, 1.1 s of silence
    replacement = tmp_path / "replacement.wav"
    replacement.write_bytes(other)
    os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    replacement.rename(folder / "x.wav")
    rerun = run_cli(folder, "-o", out, "--json", *FAST)
    events = [json.loads(line) for line in rerun.stdout.splitlines()]
    assert [e["event"] for e in events] == ["started", "done"], events
    assert wer(CARDS_TEXT, (out / "x.txt").read_text() or "-") == 1.0  # silence, not the cards


def test_only_kvscribe_s_own_leftovers_are_removed(tmp_path):
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    shutil.copy(CARDS, folder / "x.wav")
    (out / "photos").mkdir(parents=True)
    theirs = out / "photos" / ".holiday.backup_2024.part"
    theirs.write_text("precious")
    ours = out / ".x.txt.kvscribe-a1b2c3d4.part"  # a kill -9 while x.txt was written
    ours.write_text("half")
    (out / ".kvscribe").mkdir()
    staging = out / ".kvscribe" / ".manifest.jsonl.kvscribe-012345.part"
    staging.write_text("half")
    assert run_cli(folder, "-o", out, *FAST).code == 0
    assert theirs.read_text() == "precious"
    assert not ours.exists() and not staging.exists()


def _folder_of(tmp_path: Path, files: int) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for index in range(files):
        shutil.copy(SAMPLE, folder / f"f{index}.wav")
    return folder


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_workers_exit_when_their_driver_is_killed(tmp_path):
    folder = _folder_of(tmp_path, 12)
    argv = [KVSCRIBE, folder, "-o", tmp_path / "out", "--jobs", "2", *FAST]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    workers = workers_of(proc, 2)
    assert workers, "no worker processes started"
    proc.kill()  # the driver alone: kill -9, the OOM killer
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.05)
    left = [pid for pid in workers if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "workers outlived their driver"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_ctrl_c_while_the_workers_start_is_one_summary_and_no_traceback(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group, workers that are still
    importing and loading their model too."""
    folder = _folder_of(tmp_path, 6)
    argv = [KVSCRIBE, folder, "-o", tmp_path / "out", "--jobs", "2", "-f", "txt"]
    proc = subprocess.Popen(
        argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True
    )
    stderr: list[bytes] = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    reader.start()
    assert workers_of(proc, 1), "no worker process started"
    os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    text = b"".join(stderr).decode(errors="replace")
    assert code == ExitCode.INTERRUPTED, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text


def test_a_pipe_or_a_symlink_is_written_through_never_replaced(tmp_path):
    """`--stats-json /dev/stdout` (a symlink to a pipe or a terminal), a FIFO, a link to a
    file: the run writes into what is there. Replacing it by a file (as root, a device
    node too) broke the reader and the link."""
    from kvscribe.atomic_file import atomic_write_text

    fifo = tmp_path / "stats.fifo"
    os.mkfifo(fifo)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()), daemon=True)
    reader.start()
    atomic_write_text(fifo, '{"a": 1}\n')
    reader.join(10)
    assert read == ['{"a": 1}\n'] and fifo.is_fifo()
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target.name)
    atomic_write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert not list(tmp_path.glob(".*.part"))


def test_stats_json_is_written_by_every_run_and_counts_every_failure(tmp_path):
    """A script reads --stats-json after each run: a run that transcribed nothing wrote
    none (the last run's file stayed), and inputs that failed before a worker took them
    (missing, empty) were left out of it with -o, though not without."""
    folder, out, stats = tmp_path / "in", tmp_path / "out", tmp_path / "stats.json"
    folder.mkdir()
    shutil.copy(CARDS, folder / "a.wav")
    (folder / "empty.wav").write_bytes(b"")
    first = run_cli(folder, "-o", out, *FAST, "--stats-json", stats)
    assert first.code == ExitCode.SOME_FAILED
    report = json.loads(stats.read_text())
    assert (report["files_done"], report["files_failed"]) == (1, 1)
    stats.unlink()
    again = run_cli(folder / "a.wav", "-o", out, *FAST, "--stats-json", stats)  # done before
    assert again.code == 0
    report = json.loads(stats.read_text())
    assert (report["files_done"], report["files_failed"]) == (0, 0)
    assert any("1 done before" in note for note in report["notes"]), report["notes"]
    missing = run_cli(tmp_path / "nothing.wav", *FAST, "--stats-json", stats)
    assert missing.code == ExitCode.INPUT_NOT_FOUND
    assert json.loads(stats.read_text())["files_failed"] == 1


def test_fail_fast_stops_at_an_input_that_fails_before_it_is_decoded(tmp_path):
    """A missing or empty input is a failure too: with --fail-fast nothing after it runs
    (every file was transcribed, then exit 1)."""
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    shutil.copy(SAMPLE, folder / "a.wav")
    result = run_cli(tmp_path / "missing.wav", folder, "-o", out, "--fail-fast", "--json", *FAST)
    assert result.code == ExitCode.SOME_FAILED
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["event"] for e in events] == ["failed"], events
    assert not (out / "a.txt").exists()


def test_a_record_cut_off_by_a_crash_does_not_swallow_the_next(tmp_path):
    """The manifest's last line lacks its newline after a crash mid-write: the next
    record was appended onto it, and both were unreadable (their inputs redone)."""
    from kvscribe.manifest import Manifest, Record

    out = tmp_path / "out"
    with Manifest(out) as manifest:
        manifest.add(Record("/in/a.wav", None, "k", "done"))
    path = out / ".kvscribe" / "manifest.jsonl"
    path.write_text(path.read_text() + '{"v": 1, "input": "/in/b.wa')  # torn
    with Manifest(out) as manifest:
        manifest.add(Record("/in/c.wav", None, "k", "done"))
    with Manifest(out) as manifest:
        assert sorted(manifest.records) == ["/in/a.wav", "/in/c.wav"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_record_a_full_disk_refused_is_not_raised_again_when_the_manifest_closes(tmp_path):
    """The failed append stays in the file's buffer; compacting closed the file, which
    flushed it again, and the raw OSError replaced the one-line error and the summary."""
    from kvscribe.errors import OutputError
    from kvscribe.manifest import Manifest, Record

    out = tmp_path / "out"
    with Manifest(out) as manifest:
        manifest.add(Record("/in/a.wav", None, "k", "done"))
        manifest._handle.close()
        manifest._handle = open("/dev/full", "a", encoding="utf-8")  # noqa: SIM115 ENOSPC
        with pytest.raises(OutputError):
            manifest.add(Record("/in/b.wav", None, "k", "done"))
        manifest.compact()  # raised OSError
    with Manifest(out) as manifest:
        assert sorted(manifest.records) == ["/in/a.wav"]


@pytest.mark.parametrize(
    ("sent", "code"),
    [(signal.SIGINT, ExitCode.INTERRUPTED), (signal.SIGTERM, ExitCode.TERMINATED)],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stop_while_the_manifest_compacts_comes_after_it_is_whole(
    tmp_path, monkeypatch, sent, code
):
    """A second Ctrl-C that stops a batch lands while its manifest compacts: raised inside
    the write, it left `.manifest.jsonl.kvscribe-<pid>.part` behind (seen in CI). The signal
    is real; only its moment is chosen, at the fsync, which no press can hit reliably."""
    from kvscribe.cli.termination import sigterm_stops_like_ctrl_c
    from kvscribe.manifest import Manifest, Record

    out = tmp_path / "out"
    real_fsync = os.fsync

    def fsync_with_a_signal_arriving(fd):
        signal.raise_signal(sent)
        real_fsync(fd)

    with (
        pytest.raises(SystemExit) as stopped,
        sigterm_stops_like_ctrl_c(),
        Manifest(out) as manifest,
    ):
        for name in ("a", "b", "a"):
            manifest.add(Record(f"/in/{name}.wav", None, "k", "done"))
        monkeypatch.setattr(os, "fsync", fsync_with_a_signal_arriving)
        manifest.compact()
    monkeypatch.undo()
    assert stopped.value.code == code
    assert not [p.name for p in out.rglob("*") if p.name.endswith(".part")]
    lines = (out / ".kvscribe" / "manifest.jsonl").read_text().splitlines()
    assert [json.loads(line)["input"] for line in lines] == ["/in/a.wav", "/in/b.wav"]
