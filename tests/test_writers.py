"""Writers: formats parse with the parsers users have, and writes are atomic."""

from __future__ import annotations

import json
import os

import pytest
import srt
import webvtt

from kvscribe.errors import OutputError
from kvscribe.types import Segment, Transcript
from kvscribe.writers import (
    FORMATS,
    RENDERERS,
    atomic_write_text,
    render_console_line,
    timestamp,
    write_outputs,
)

TRANSCRIPT = Transcript(
    source="talk.wav",
    language="en",
    duration=3725.5,
    segments=[
        Segment(0, 0.0, 2.5, " Hello there."),
        Segment(1, 2.5, 3661.042, " A cue --> with an arrow\nand a newline."),
        Segment(2, 3661.042, 3725.5, " Ünïcödé at the end."),
        Segment(3, 3725.5, 3725.5, "   "),  # blank text: no cue
    ],
)


@pytest.mark.parametrize(
    ("seconds", "kwargs", "expected"),
    [
        (0.0, {}, "00:00:00.000"),
        (3661.0425, {"marker": ","}, "01:01:01,042"),
        (59.9996, {}, "00:01:00.000"),
        (61.5, {"always_hours": False}, "01:01.500"),
        (-0.2, {}, "00:00:00.000"),
    ],
)
def test_timestamp(seconds, kwargs, expected):
    assert timestamp(seconds, **kwargs) == expected


def test_srt_parses_with_the_srt_package():
    cues = list(srt.parse(RENDERERS["srt"](TRANSCRIPT)))
    assert [c.index for c in cues] == [1, 2, 3]
    assert cues[1].start.total_seconds() == pytest.approx(2.5)
    assert cues[1].end.total_seconds() == pytest.approx(3661.042)
    assert cues[1].content == "A cue -> with an arrow and a newline."


def test_vtt_parses_with_webvtt_py(tmp_path):
    path = tmp_path / "t.vtt"
    path.write_text(RENDERERS["vtt"](TRANSCRIPT), encoding="utf-8")
    captions = webvtt.read(str(path))
    assert [c.text for c in captions] == [
        "Hello there.",
        "A cue -> with an arrow and a newline.",
        "Ünïcödé at the end.",
    ]
    assert captions[2].start == "01:01:01.042"


def test_json_holds_segments_with_start_end_text():
    document = json.loads(RENDERERS["json"](TRANSCRIPT))
    assert document["language"] == "en"
    assert [s["start"] for s in document["segments"]] == [0.0, 2.5, 3661.042, 3725.5]
    assert document["segments"][2]["text"] == " Ünïcödé at the end."
    assert document["text"].startswith("Hello there.")


def test_tsv_uses_integer_milliseconds_like_openai_whisper():
    lines = RENDERERS["tsv"](TRANSCRIPT).splitlines()
    assert lines[0] == "start\tend\ttext"
    assert lines[2].split("\t")[:2] == ["2500", "3661042"]
    assert len(lines) == 4


def test_txt_is_one_segment_per_line():
    assert RENDERERS["txt"](TRANSCRIPT).splitlines() == [
        "Hello there.",
        "A cue -> with an arrow and a newline.",
        "Ünïcödé at the end.",
    ]


def test_console_line():
    line = render_console_line(8.0, 11.0, " ask what you can do")
    assert line == "[00:08.000 --> 00:11.000]  ask what you can do"


def test_write_outputs_names_files_stem_dot_format(tmp_path):
    written = write_outputs(TRANSCRIPT, tmp_path / "out", "talk", FORMATS)
    assert [p.name for p in written] == [f"talk.{f}" for f in FORMATS]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in written)


def test_interrupted_write_leaves_neither_partial_file_nor_temp(tmp_path, monkeypatch):
    target = tmp_path / "talk.txt"

    def interrupted(*_args):  # a Ctrl-C arriving between write and rename
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, "hello\n")
    assert list(tmp_path.iterdir()) == []


def test_existing_output_is_kept_whole_when_a_rewrite_fails(tmp_path, monkeypatch):
    target = tmp_path / "talk.txt"
    atomic_write_text(target, "first version\n")
    monkeypatch.setattr(os, "fsync", lambda _fd: (_ for _ in ()).throw(OSError(28, "No space")))
    with pytest.raises(OutputError, match="No space"):
        atomic_write_text(target, "second version\n")
    assert target.read_text() == "first version\n"
    assert [p.name for p in tmp_path.iterdir()] == ["talk.txt"]


def test_unwritable_output_dir_is_an_output_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OutputError, match="cannot write here"):
        atomic_write_text(blocker / "talk.txt", "x")
