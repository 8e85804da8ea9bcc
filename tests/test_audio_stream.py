"""Streamed audio and features equal the whole-file ones, in memory bounded by a window."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.audio.stream import (
    READ_AHEAD,
    Joined,
    StreamedAudio,
    frame_peaks,
    open_streamed,
)
from kvscribe.errors import AudioDecodeError
from kvscribe.voice.regions import speech_probabilities
from tests.conftest import EVAL_DIR, SAMPLE
from tests.media import write_wav

pytestmark = [pytest.mark.eval]

LONG_FORM = EVAL_DIR / "espeak_longform_en.wav"


@pytest.fixture(scope="module")
def six_minutes(tmp_path_factory) -> Path:
    """JFK, repeated to 6 minutes with digital silence between (a file, decoded for real)."""
    jfk = load_audio(SAMPLE)
    gap = np.zeros(2 * SAMPLE_RATE, dtype=np.float32)
    repeats = int(360 * SAMPLE_RATE // (jfk.size + gap.size)) + 1
    audio = np.concatenate([np.concatenate([jfk, gap])] * repeats)[: 360 * SAMPLE_RATE]
    return write_wav(tmp_path_factory.mktemp("long") / "six.wav", audio)


def test_slices_equal_the_whole_file_reading_forwards_and_back(six_minutes):
    whole = load_audio(six_minutes)
    streamed = open_streamed(six_minutes, hold_seconds=0)
    assert streamed.size == whole.size and streamed.peaks.size == -(-whole.size // 160)
    window = 30 * SAMPLE_RATE
    for start in range(0, whole.size, window // 2):  # overlapping forward reads
        assert np.array_equal(streamed[start : start + window], whole[start : start + window])
    assert streamed.restarts == 0
    assert np.array_equal(streamed[5:1000], whole[5:1000])  # far behind: decoded again
    assert streamed.restarts == 1
    assert np.array_equal(streamed[whole.size - 10 : whole.size + 99], whole[-10:])
    assert streamed[7:7].size == 0


def test_two_threads_read_a_streamed_file_at_once(six_minutes):
    """The replicas read their rows' audio from threads of their own; a batch's chunks in
    lanes lie minutes apart, so both move the file's decoder at once. Unguarded, a 60-minute
    file failed with "generator already executing" (docs/long-files.md); each thread's
    slices must equal the file's, every time."""
    from concurrent.futures import ThreadPoolExecutor

    whole = load_audio(six_minutes)
    window = 30 * SAMPLE_RATE

    def read(streamed, first: int) -> bool:
        starts = range(first * window, whole.size - window, 2 * window)
        return all(np.array_equal(streamed[a : a + window], whole[a : a + window]) for a in starts)

    for _ in range(3):
        streamed = open_streamed(six_minutes, hold_seconds=0)
        streamed.hold_history(360)  # a span's reads, as the batched path asks
        with ThreadPoolExecutor(2) as pool:
            assert all(pool.map(read, (streamed, streamed), (0, 1)))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="a named pipe holds the read")
def test_a_file_closed_while_another_thread_reads_it_waits_for_the_read(tmp_path):
    """A run stopped by SIGTERM closes its file on the main thread while a replica's thread
    may be inside the file's decoder: closing a generator that is running raised
    "generator already executing", and the stopped run ended as an internal error (CI,
    stop 90). Here a named pipe whose writer waits holds the read inside the decoder."""
    clip = write_wav(tmp_path / "a.wav", load_audio(SAMPLE))
    whole, data = load_audio(clip), clip.read_bytes()
    pipe = tmp_path / "pipe.wav"
    os.mkfifo(pipe)
    go_on, read, closed = threading.Event(), [], []

    def write() -> None:
        with pipe.open("wb") as out:
            out.write(data[: len(data) // 2])
            out.flush()
            go_on.wait(60)
            out.write(data[len(data) // 2 :])

    streamed = StreamedAudio(pipe, whole.size, frame_peaks(whole))

    def read_a_quarter() -> None:  # the decoder reads ahead, into the half not yet written
        read.append(np.array_equal(streamed[0 : whole.size // 4], whole[: whole.size // 4]))

    def close() -> None:
        closed.append(time.monotonic())  # when the close began
        try:
            streamed.close()
        except Exception as exc:
            closed.append(exc)
        closed.append(time.monotonic())

    threads = [threading.Thread(target=t, daemon=True) for t in (write, read_a_quarter, close)]
    threads[0].start(), threads[1].start()
    deadline = time.monotonic() + 30
    while not (streamed._chunks is not None and streamed._chunks.gi_running):
        assert time.monotonic() < deadline, "the read never reached the decoder"
        time.sleep(0.01)
    threads[2].start()
    time.sleep(0.3)  # the close reaches the decoder's lock while the read still holds it
    released = time.monotonic()
    go_on.set()
    for thread in threads:
        thread.join(30)
    assert read == [True]
    assert not [c for c in closed if isinstance(c, Exception)], closed
    began, ended = closed
    assert began < released, "the close began after the read was let go: nothing was tested"
    assert ended > released  # it waited for the read
    assert streamed._chunks is None


def test_a_file_of_ten_minutes_or_less_keeps_its_scan_s_samples(six_minutes, tmp_path):
    """Held whole, the file is never decoded again: its reads still work once it is gone.
    One sample over the limit and the file streams (and needs the file)."""
    whole = load_audio(six_minutes)
    copy = tmp_path / "six.wav"
    copy.write_bytes(six_minutes.read_bytes())
    held = open_streamed(copy)
    copy.unlink()
    assert np.array_equal(held[0 : held.size], whole) and held.restarts == 0
    assert np.array_equal(held[5:1000], whole[5:1000]) and held.restarts == 0

    copy.write_bytes(six_minutes.read_bytes())
    streamed = open_streamed(copy, hold_seconds=(whole.size - 1) / SAMPLE_RATE)
    copy.unlink()
    with pytest.raises(AudioDecodeError):
        streamed[0 : streamed.size]


def test_memory_held_is_the_history_plus_the_read_not_the_file(six_minutes):
    streamed = open_streamed(six_minutes, hold_seconds=0)
    window = 30 * SAMPLE_RATE
    held = []
    for start in range(0, streamed.size, window):
        streamed[start : start + window]
        held.append(streamed._buffer.size)
    # the history, the read, what is decoded ahead and not yet forgotten behind (one
    # READ_AHEAD step each way), and one decoder frame of slack
    assert max(held) <= streamed.history + 2 * window + 2 * READ_AHEAD
    assert max(held) < streamed.size // 2
    with pytest.raises(TypeError):
        np.asarray(streamed)  # never materialised by accident


def test_a_file_that_shrinks_after_its_scan_is_a_one_line_error(tmp_path):
    path = write_wav(tmp_path / "a.wav", load_audio(SAMPLE))
    streamed = open_streamed(path, hold_seconds=0)
    write_wav(path, load_audio(SAMPLE)[:SAMPLE_RATE])
    with pytest.raises(AudioDecodeError, match="changed while") as caught:
        streamed[0 : streamed.size]
    assert str(path) in caught.value.one_line()


def test_joined_regions_read_like_their_concatenation():
    audio = np.arange(100_000, dtype=np.float32)
    regions = [(10, 500), (700, 40_000), (40_000, 40_010), (90_000, 100_000)]
    joined = Joined(audio, regions)
    expected = np.concatenate([audio[a:b] for a, b in regions])
    assert joined.size == expected.size
    for start, stop in [(0, 10), (0, expected.size), (480, 520), (39_770, 39_800), (5, 5)]:
        assert np.array_equal(joined[start:stop], expected[start:stop])


def test_peaks_and_vad_probabilities_streamed_equal_whole(six_minutes):
    whole, streamed = load_audio(six_minutes), open_streamed(six_minutes, hold_seconds=0)
    assert np.array_equal(frame_peaks(streamed), frame_peaks(whole))
    from kvscribe.voice.silero import SileroVad

    fed_whole = SileroVad(threads=2).probabilities(whole[: 90 * SAMPLE_RATE])
    fed_blocks = speech_probabilities(streamed[0 : 90 * SAMPLE_RATE])
    assert np.array_equal(fed_blocks, fed_whole)


@pytest.mark.parametrize("front", ["numpy", "torch"])
@pytest.mark.parametrize("clip", [SAMPLE, LONG_FORM], ids=["jfk", "long_form"])
def test_streamed_mel_equals_the_whole_file_features(front, clip):
    from kvscribe.audio.streamed_mel import NumpyFrontEnd, StreamedMel, TorchFrontEnd

    whole_audio = load_audio(clip)
    if front == "numpy":
        from faster_whisper.feature_extractor import FeatureExtractor

        extractor = FeatureExtractor()
        whole, end = extractor(whole_audio), NumpyFrontEnd(extractor)
    else:
        torch = pytest.importorskip("torch")
        from kvscribe.audio.mel import log_mel

        whole, end = log_mel(torch.from_numpy(whole_audio), 80).numpy(), TorchFrontEnd(80)
    mel = StreamedMel(open_streamed(clip, hold_seconds=0), end)
    assert mel.shape == whole.shape
    pieces = [np.asarray(mel[:, a : a + 3000]) for a in range(0, mel.shape[1], 3000)]
    _assert_equal_to_rounding(np.concatenate(pieces, axis=1), whole)
    at = whole.shape[1] // 3
    view = mel[..., at:]  # an open slice stays lazy and keeps the same frames
    assert view.shape == (80, whole.shape[1] - at)
    _assert_equal_to_rounding(np.asarray(view[..., :3000]), whole[:, at : at + 3000])


def _assert_equal_to_rounding(streamed: np.ndarray, whole: np.ndarray) -> None:
    """Equal but for float32 rounding. The mel projection is a matrix product whose BLAS
    kernel (and so its summation order) depends on the slice's shape and the CPU: a
    value may move by an ulp or so (seen: 1.2e-7, on 0.5 % of values). The bound is a
    201-term float32 sum's worst relative error, through log10 and Whisper's /4: far below
    any real difference (a frame off by one moves values by 1e-2 and more)."""
    assert streamed.shape == whole.shape
    assert np.max(np.abs(streamed - whole)) <= 201 * np.finfo(np.float32).eps / np.log(10) / 4
