"""Writers: formats parse with the parsers users have, and writes are atomic."""

from __future__ import annotations

import json
import os

import pytest
import srt
import webvtt

from kvscribe.atomic_file import atomic_write_text
from kvscribe.errors import OutputError, UsageError
from kvscribe.types import Segment, Transcript, Word
from kvscribe.writers import (
    FORMATS,
    RENDERERS,
    WriterOptions,
    render_console_line,
    render_json,
    render_srt,
    render_tsv,
    render_vtt,
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


def test_vtt_writes_hours_only_when_there_are_any():
    first = RENDERERS["vtt"](TRANSCRIPT).split("\n\n")[1]
    assert first.startswith("00:00.000 --> 00:02.500\n")


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


def _words(*spans: tuple[str, float, float]) -> tuple[Word, ...]:
    return tuple(Word(start, end, text, 0.9) for text, start, end in spans)


# Two segments with word times: a 0.1 s gap before "fox", a 4.6 s pause before "Hello".
WORDED = Transcript(
    source="fox.wav",
    language="en",
    duration=10.0,
    language_probability=0.97,
    segments=[
        Segment(
            0,
            0.0,
            3.4,
            " The quick brown fox jumps over the lazy dog.",
            tokens=(440, 2068),
            avg_logprob=-0.25,
            no_speech_prob=0.01,
            seek=0,
            temperature=0.0,
            compression_ratio=1.1,
            words=_words(
                (" The", 0.0, 0.3),
                (" quick", 0.3, 0.6),
                (" brown", 0.6, 0.9),
                (" fox", 1.0, 1.4),
                (" jumps", 1.4, 1.8),
                (" over", 1.8, 2.1),
                (" the", 2.1, 2.3),
                (" lazy", 2.3, 2.8),
                (" dog.", 2.8, 3.4),
            ),
        ),
        Segment(
            1,
            8.0,
            9.5,
            " Hello --> world.",
            seek=0,
            words=_words((" Hello", 8.0, 8.6), (" -->", 8.6, 8.8), (" world.", 8.8, 9.5)),
        ),
    ],
)


def _cues(text: str) -> list[tuple[float, float, str]]:
    return [(c.start.total_seconds(), c.end.total_seconds(), c.content) for c in srt.parse(text)]


def test_json_has_openai_whisper_fields_with_kvscribe_own_apart():
    document = json.loads(render_json(WORDED))
    assert list(document) == ["text", "segments", "language", "kvscribe"]
    first, second = document["segments"]
    assert list(first) == [
        "id",
        "seek",
        "start",
        "end",
        "text",
        "tokens",
        "temperature",
        "avg_logprob",
        "compression_ratio",
        "no_speech_prob",
        "words",
    ]
    assert first["tokens"] == [440, 2068] and first["temperature"] == 0.0
    assert first["words"][3] == {"word": " fox", "start": 1.0, "end": 1.4, "probability": 0.9}
    assert second["temperature"] is None and second["avg_logprob"] is None  # not measured
    assert document["kvscribe"] == {
        "source": "fox.wav",
        "duration": 10.0,
        "language_probability": 0.97,
        "segments": [{"id": 0, "window": 0}, {"id": 1, "window": 0}],
    }


def test_json_without_words_has_no_words_key_and_null_for_nan():
    broken = Segment(4, 1.0, 2.0, " x", avg_logprob=float("nan"))
    document = json.loads(render_json(Transcript("a.wav", "en", 2.0, [broken])))
    assert "words" not in document["segments"][0]
    assert document["segments"][0]["avg_logprob"] is None
    assert document["kvscribe"]["language_probability"] is None


def test_words_make_cues_per_segment_by_default():
    assert [text for _, _, text in _cues(render_srt(WORDED))] == [
        "The quick brown fox jumps over the lazy dog.",
        "Hello -> world.",
    ]


def test_highlight_words_underlines_each_word_in_turn_and_fills_gaps():
    cues = _cues(render_srt(WORDED, WriterOptions(highlight_words=True)))
    assert len(cues) == 9 + 1 + 3  # a cue per word, one for the gap before "fox"
    assert cues[0] == (0.0, 0.3, "<u>The</u> quick brown fox jumps over the lazy dog.")
    assert cues[3] == (0.9, 1.0, "The quick brown fox jumps over the lazy dog.")
    assert cues[4] == (1.0, 1.4, "The quick brown <u>fox</u> jumps over the lazy dog.")
    assert cues[-1] == (8.8, 9.5, "Hello -> <u>world.</u>")


def test_line_width_wraps_and_line_count_starts_a_new_cue():
    options = WriterOptions(max_line_width=16, max_line_count=2)
    assert _cues(render_srt(WORDED, options)) == [
        (0.0, 2.1, "The quick brown\nfox jumps over"),
        (2.1, 3.4, "the lazy dog."),
        (8.0, 9.5, "Hello -> world."),
    ]


def test_line_width_alone_wraps_inside_segment_cues():
    cues = _cues(render_srt(WORDED, WriterOptions(max_line_width=16)))
    assert [text for _, _, text in cues] == [
        "The quick brown\nfox jumps over\nthe lazy dog.",
        "Hello -> world.",
    ]


def test_a_long_pause_starts_a_new_cue_when_cues_are_laid_out_by_width():
    options = WriterOptions(max_line_width=42, max_line_count=3)
    assert [text for _, _, text in _cues(render_srt(WORDED, options))] == [
        "The quick brown fox jumps over the lazy\ndog.",
        "Hello -> world.",  # room for a third line, but 4.6 s after "dog."
    ]


def test_max_words_per_line_splits_segments():
    cues = _cues(render_srt(WORDED, WriterOptions(max_words_per_line=4)))
    assert [text for _, _, text in cues] == [
        "The quick brown fox",
        "jumps over the lazy",
        "dog.",
        "Hello -> world.",
    ]


def test_word_options_do_nothing_without_words():
    options = WriterOptions(highlight_words=True, max_line_width=5, max_line_count=1)
    assert render_srt(TRANSCRIPT, options) == render_srt(TRANSCRIPT)
    assert render_vtt(TRANSCRIPT, options) == render_vtt(TRANSCRIPT)


def test_a_segment_without_words_keeps_its_text_among_worded_ones():
    orphan = Segment(2, 10.0, 11.0, " Not aligned.")
    transcript = Transcript("fox.wav", "en", 11.0, [*WORDED.segments, orphan])
    assert _cues(render_srt(transcript))[-1] == (10.0, 11.0, "Not aligned.")


def test_word_level_tsv_has_a_row_per_word():
    rows = render_tsv(WORDED, WriterOptions(word_level_tsv=True)).splitlines()
    assert rows[0] == "start\tend\ttext"
    assert rows[1:4] == ["0\t300\tThe", "300\t600\tquick", "600\t900\tbrown"]
    assert rows[-1] == "8800\t9500\tworld."
    assert len(rows) == 1 + 12
    assert render_tsv(WORDED).splitlines()[1:] == [
        "0\t3400\tThe quick brown fox jumps over the lazy dog.",
        "8000\t9500\tHello -> world.",
    ]


@pytest.mark.parametrize("field", ["max_line_width", "max_line_count", "max_words_per_line"])
def test_a_limit_below_one_is_a_usage_error(field):
    with pytest.raises(UsageError, match="at least 1"):
        WriterOptions(**{field: 0})


def test_write_outputs_passes_options_to_every_format(tmp_path):
    options = WriterOptions(highlight_words=True, word_level_tsv=True)
    written = write_outputs(WORDED, tmp_path, "fox", ("srt", "tsv"), options)
    assert [p.read_text(encoding="utf-8") for p in written] == [
        render_srt(WORDED, options),
        render_tsv(WORDED, options),
    ]
    assert "<u>" in written[0].read_text(encoding="utf-8")
