"""What a batch run (-o) shows while it works, for real through the CLI: each file's audio
seconds and time left on a terminal, each segment as it becomes final on stderr (named by
its file when several run), nothing of it on stdout, nothing with -q, and the same files
written either way. A terminal is Rich's: TTY_COMPATIBLE=1 makes stderr one for it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import CARDS, EVAL_DIR, run_cli

pytestmark = [pytest.mark.model]

FAST = ("--beam-size", "1", "-f", "txt,json")
# A real 1.1 s recording, one segment: its bar and its line show as the 11 s sample's did,
# at a tenth of the decoding.
FIRST = CARDS
SECOND = EVAL_DIR / "ps_librivox_ss01_0870.wav"  # 7.1 s of speech, several segments
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def terminal(monkeypatch):
    """stderr counts as a terminal for Rich (the CLI's children inherit the environment)."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "160")


@pytest.fixture
def pipe(monkeypatch):
    monkeypatch.setenv("TTY_COMPATIBLE", "0")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("progress") / "in"
    root.mkdir()
    shutil.copy(FIRST, root / "cards.wav")
    shutil.copy(SECOND, root / "second.wav")
    return root


def _lines(stderr: str) -> list[str]:
    """Every line and every redrawn frame of a terminal's stderr, as text."""
    return [line.rstrip() for line in re.split(r"[\r\n]", _CONTROL.sub("", stderr)) if line]


def _segments(json_output: Path) -> list[str]:
    """The lines a segment prints as, from the file written: `[start --> end]  text`."""
    from kvscribe.writers import render_console_line

    segments = json.loads(json_output.read_text())["segments"]
    assert segments
    return [render_console_line(s["start"], s["end"], s["text"]) for s in segments]


def _outputs(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".kvscribe" not in p.parts
    }


@pytest.mark.slow
def test_one_file_shows_its_audio_and_segments_on_stderr_and_q_shows_neither(terminal, tmp_path):
    shown = run_cli(FIRST, "-o", tmp_path / "shown", *FAST)
    assert shown.code == 0, shown.stderr
    assert shown.stdout == ""
    lines = _lines(shown.stderr)
    # The file's own bar: audio seconds, then a time left from the first segment on.
    assert any(line.startswith(FIRST.name) and "0/1 s audio" in line for line in lines)
    done = re.compile(rf"{re.escape(FIRST.name)} .* 1/1 s audio +\d+:\d\d:\d\d$")
    assert any(done.search(line) for line in lines)
    for segment in _segments(tmp_path / "shown" / f"{FIRST.stem}.json"):
        assert segment in lines  # a line of its own, as `kvscribe FILE` prints it on stdout
    quiet = run_cli(FIRST, "-o", tmp_path / "quiet", *FAST, "-q")
    assert (quiet.code, quiet.stdout, quiet.stderr) == (0, "", "")
    assert _outputs(tmp_path / "shown") == _outputs(tmp_path / "quiet")


@pytest.mark.parametrize("jobs", ["1", pytest.param("2", marks=pytest.mark.slow)])
def test_a_pipe_gets_each_segment_once_named_before_its_file_is_done(pipe, folder, tmp_path, jobs):
    """No bar and no redraws off a terminal: a line per segment, and the existing line per
    file; --json's events alone on stdout. A worker's progress comes before its result."""
    shown = run_cli(folder, "-o", tmp_path / "shown", "--jobs", jobs, "--json", *FAST)
    assert shown.code == 0, shown.stderr
    events = [json.loads(line) for line in shown.stdout.splitlines()]
    assert sorted(e["event"] for e in events) == ["done", "done", "started", "started"]
    assert "\r" not in shown.stderr and "\x1b" not in shown.stderr
    assert "s audio" not in shown.stderr
    lines = shown.stderr.splitlines()
    for name in ("cards", "second"):
        path = folder / f"{name}.wav"
        done_line = next(i for i, line in enumerate(lines) if line.endswith(f"] {path}"))
        for segment in _segments(tmp_path / "shown" / f"{name}.json"):
            assert lines.count(f"{path} {segment}") == 1, segment
            assert lines.index(f"{path} {segment}") < done_line
    quiet = run_cli(folder, "-o", tmp_path / "quiet", "--jobs", jobs, *FAST, "-q")
    assert (quiet.code, quiet.stdout, quiet.stderr) == (0, "", "")
    assert _outputs(tmp_path / "shown") == _outputs(tmp_path / "quiet")


@pytest.mark.slow
def test_jobs_2_on_a_terminal_shows_a_bar_and_the_segments_of_each_file(terminal, folder, tmp_path):
    shown = run_cli(folder, "-o", tmp_path / "out", "--jobs", "2", *FAST)
    assert shown.code == 0, shown.stderr
    assert shown.stdout == ""
    lines = _lines(shown.stderr)
    assert any(re.search(r"transcribing .* 1/2 files", line) for line in lines)
    for name, seconds in (("cards", 1), ("second", 7)):
        bar = re.compile(rf"^  {name}\.wav .* {seconds}/{seconds} s audio +\d+:\d\d:\d\d$")
        assert any(bar.search(line) for line in lines), name
        for segment in _segments(tmp_path / "out" / f"{name}.json"):
            assert f"{folder / name}.wav {segment}" in lines
