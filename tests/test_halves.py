"""`--batch-size 1` as two halves side by side (backends/ctranslate2/halves.py): where the cut
falls, the second half's clock, the order and errors of the two streams, a long file's second
reader, and a real decode of real speech cut in two."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.audio.stream import open_streamed
from kvscribe.backends.ctranslate2 import halves
from kvscribe.backends.ctranslate2 import stream as ct2_stream
from kvscribe.bench.wer import pooled_wer
from kvscribe.contract import DecodeRequest
from kvscribe.pipeline import transcribe_speech
from tests import loaded, media
from tests.conftest import EVAL_DIR, longest_deleted_run, run_cli
from tests.fw_segments import fw_segment, fw_word

JOINED_REAL = EVAL_DIR.parent / "clips_joined" / "joined_real.wav"
LIBRIVOX = EVAL_DIR / "ps_librivox_ss01_0870.wav"


def _speech(seconds: float) -> np.ndarray:
    """Real speech, repeated up to `seconds`."""
    clip = load_audio(LIBRIVOX)
    return np.resize(clip, int(seconds * SAMPLE_RATE)).astype(np.float32)


def _quiet(seconds: float, level: float = 0.002) -> np.ndarray:
    noise = np.random.default_rng(3).standard_normal(int(seconds * SAMPLE_RATE))
    return (level * noise).astype(np.float32)


def _assert_cut_in_the_pause_from(audio: np.ndarray, pause_start_seconds: float) -> None:
    """The cut falls inside the 0.8 s pause starting at `pause_start_seconds`, away from its
    edges (the middle of a pause, where no word is cut)."""
    at = halves.cut(audio)
    pause_start = pause_start_seconds * SAMPLE_RATE
    assert at is not None
    assert pause_start + 0.2 * SAMPLE_RATE <= at <= pause_start + 0.6 * SAMPLE_RATE


def test_the_cut_falls_in_the_pause_near_the_middle():
    """Continuous speech with one real pause at 45 % of it: the cut is inside the pause, not
    in a word; a pause outside the middle (at 10 %) is not taken though it is longer."""
    audio = np.concatenate([_speech(6.0), _quiet(2.0), _speech(22.0), _quiet(0.8), _speech(36.0)])
    _assert_cut_in_the_pause_from(audio, 30.0)


def test_of_pauses_about_as_quiet_the_cut_takes_the_one_nearest_the_middle():
    """Two equally quiet pauses, at 42 % and 52 % of the input: the cut is in the later one,
    which halves it more evenly (the quietest first one had taken the earlier, and the
    longer second half ran on alone)."""
    audio = np.concatenate([_speech(41.8), _quiet(0.8), _speech(9.2), _quiet(0.8), _speech(47.4)])
    _assert_cut_in_the_pause_from(audio, 51.8)


def test_a_quiet_rooms_pause_near_the_middle_is_taken_over_a_silent_one_further_off():
    """A pause of near digital silence (what is left where silence was cut out between two
    utterances) at 42 %, and a pause over a quiet room's floor (about 1 % of the speech's
    level) at 50 %: the cut is in the later one. Judged against the silent pause alone, the
    room's was far louder than it and never taken (the telephone recording cut at 43 %)."""
    audio = np.concatenate(
        [_speech(41.8), _quiet(0.8, 1e-5), _speech(8.2), _quiet(0.8, 0.001), _speech(48.4)]
    )
    _assert_cut_in_the_pause_from(audio, 50.8)


def test_what_fits_one_window_stays_whole():
    assert halves.cut(_speech(halves.MIN_SECONDS - 1.0)) is None
    assert halves.cut(_speech(halves.MIN_SECONDS + 10.0)) is not None


def test_the_second_half_is_put_on_the_whole_inputs_clock():
    word = fw_word(1.0, 1.5, " ask")
    segment = fw_segment([word], tokens=[1, 2], seek=300, text=" ask not", end=2.5)
    (moved,) = ct2_stream.shifted(iter([segment]), 40 * SAMPLE_RATE)
    assert (moved.start, moved.end, moved.seek) == (41.0, 42.5, 300 + 4000)
    assert (moved.words[0].start, moved.words[0].end) == (41.0, 41.5)
    assert moved.text == segment.text and segment.start == 1.0  # the original is unchanged


def test_the_second_stream_runs_at_once_and_comes_after_the_first():
    started = threading.Event()

    def second():
        started.set()
        yield from ("c", "d")

    def first():
        assert started.wait(5), "the second half did not start beside the first"
        yield from ("a", "b")

    assert list(halves.side_by_side(first(), second)) == ["a", "b", "c", "d"]


def test_the_second_streams_error_is_raised_where_its_items_come():
    def second():
        yield "c"
        raise ValueError("second half failed")

    items = halves.side_by_side(iter(["a"]), second)
    assert next(items) == "a" and next(items) == "c"
    with pytest.raises(ValueError, match="second half failed"):
        next(items)


def test_a_consumer_that_stops_early_stops_the_second_stream():
    made = []

    def second():
        for n in range(1000):
            made.append(n)
            time.sleep(0.005)
            yield n

    items = halves.side_by_side(iter(["a"]), second)
    assert next(items) == "a"
    items.close()  # the consumer is done: the second stream stops after its current item
    count = len(made)
    time.sleep(0.05)
    assert len(made) == count < 1000
    assert not any(t.name == "kvscribe-second-half" for t in threading.enumerate())


def test_a_long_files_second_reader_reads_the_same_samples(tmp_path):
    path = tmp_path / "speech.wav"
    media.write_wav(path, _speech(40.0))
    held = open_streamed(path)
    streamed = open_streamed(path, hold_seconds=10.0)  # too long to hold: read in slices
    assert held.held and not streamed.held
    twin = streamed.twin()
    try:
        for start in (35 * SAMPLE_RATE, 2 * SAMPLE_RATE, 20 * SAMPLE_RATE):
            wanted = held[start : start + SAMPLE_RATE]
            assert np.array_equal(twin[start : start + SAMPLE_RATE], wanted)
            assert np.array_equal(streamed[start : start + SAMPLE_RATE], wanted)
    finally:
        twin.close()
        streamed.close()
    first, second = halves.halves(streamed, 20 * SAMPLE_RATE)
    assert first.source is streamed and second.source is not streamed
    assert first.size + second.size == streamed.size
    assert np.array_equal(second[:SAMPLE_RATE], held[20 * SAMPLE_RATE : 21 * SAMPLE_RATE])
    second.source.close()
    _, second_of_held = halves.halves(held, 20 * SAMPLE_RATE)
    assert second_of_held.source is held  # a held file is read from both threads as it is


@pytest.fixture(scope="module")
def two_threads():
    """The CTranslate2 backend on 2 threads, as on a 2-core machine (one thread has no
    replica to run a second half on)."""
    return loaded.ctranslate2_on_threads(2)


@pytest.mark.model
def test_real_speech_decoded_in_two_halves_keeps_its_words(two_threads):
    """The joined real recordings (50 s), sequential: cut at a pause, both halves decoded at
    once, the segments in time order, every reference phrase kept (no 5 words in a row
    missing) and the WER within the bound every sequential path keeps."""
    audio = load_audio(JOINED_REAL)
    reference = JOINED_REAL.with_suffix(".txt").read_text(encoding="utf-8")
    run = transcribe_speech(two_threads, audio, DecodeRequest(batch_size=1))
    segments = list(run.segments)
    assert "two halves side by side" in run.report.settings["engine threads"]
    at = halves.cut(audio) / SAMPLE_RATE
    assert any(s.end <= at + 1.0 for s in segments) and any(s.start >= at - 1.0 for s in segments)
    assert [s.id for s in segments] == list(range(len(segments)))
    starts = [s.start for s in segments]
    assert starts == sorted(starts)
    text = " ".join(s.text for s in segments)
    # The CLI's halves per path: MKL (AVX-512, AVX2) 0.080, oneDNN AVX-512 0.027, AVX2 0.045.
    assert longest_deleted_run(reference, text) < 5
    assert pooled_wer([(reference, text)]) <= 0.12
    assert "ask not what your country can do for you" in text.lower().replace(",", "")


@pytest.mark.slow
def test_sampled_text_of_both_halves_is_the_same_run_after_run():
    """At temperature 1.0 every token of both halves is drawn at random: two processes
    write the same text, because each half draws from a generator of its own (the second
    half's windows sampled on the first half's engine would take turns with it as the two
    threads happen to run). Two runs show the sameness; a third proved nothing more. One
    sample a window (--best-of 1): each token is still a random draw, at half the CPU."""
    texts = []
    for _ in range(2):
        result = run_cli(
            JOINED_REAL,
            *("--threads", "2", "--batch-size", "1", "--temperature", "1.0", "--beam-size", "1"),
            *("--best-of", "1", "-f", "txt"),
        )
        assert result.code == 0, result.stderr
        assert "two halves side by side" in " ".join(result.stderr.split())
        texts.append(result.stdout)
    assert texts[0].strip() and texts[0] == texts[1]


def test_a_long_files_parts_get_a_reader_of_their_own(tmp_path):
    """Digital silence or a VAD filter's pauses cut out of a file too long to hold: the
    second half reads the same parts through a second decoder, closed after it; a held
    file's parts are read as they are."""
    from kvscribe.audio.stream import Joined

    path = tmp_path / "speech.wav"
    media.write_wav(path, _speech(70.0))
    streamed = open_streamed(path, hold_seconds=10.0)
    held = open_streamed(path)
    regions = [(SAMPLE_RATE, 30 * SAMPLE_RATE), (32 * SAMPLE_RATE, 69 * SAMPLE_RATE)]
    parts = Joined(streamed, regions)
    try:
        at = halves.cut(parts)
        assert at is not None
        first, second = halves.halves(parts, at)
        twin = second.source.source
        assert isinstance(twin, type(streamed)) and twin is not streamed
        whole = Joined(held, regions)
        assert np.array_equal(second[:SAMPLE_RATE], whole[at : at + SAMPLE_RATE])
        assert np.array_equal(first[at - SAMPLE_RATE : at], whole[at - SAMPLE_RATE : at])
        assert twin._chunks is not None  # its decoder is open: it has read
        halves.close_second(parts, second.source)
        assert twin._chunks is None  # and closed
        _, of_held = halves.halves(Joined(held, regions), at)
        assert of_held.source.source is held
        halves.close_second(Joined(held, regions), of_held.source)  # nothing to close
    finally:
        streamed.close()


def test_parts_of_a_file_find_their_pause_from_the_files_scan(tmp_path):
    """The cut in parts joined from a file too long to hold is found from the file's scan,
    without decoding it again, and falls in the same pause as in the same parts held."""
    from kvscribe.audio.stream import Joined

    audio = np.concatenate([_speech(32.0), _quiet(0.8), _speech(32.0)])
    path = tmp_path / "speech.wav"
    media.write_wav(path, audio)
    streamed = open_streamed(path, hold_seconds=10.0)
    regions = [(2 * SAMPLE_RATE + 37, 40 * SAMPLE_RATE), (41 * SAMPLE_RATE, 64 * SAMPLE_RATE)]
    try:
        at = halves.cut(Joined(streamed, regions))
        assert streamed._chunks is None  # the file was not decoded for it
        pause_start = 32.0 * SAMPLE_RATE - regions[0][0]  # in the joined parts (61 s)
        assert at is not None
        assert pause_start + 0.1 * SAMPLE_RATE <= at <= pause_start + 0.7 * SAMPLE_RATE
        assert at == halves.cut(Joined(audio, regions))
    finally:
        streamed.close()
