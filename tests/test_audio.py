"""Real decoding through PyAV: every container the sample was re-encoded into, and every
way a file can be broken."""

from __future__ import annotations

import os

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.audio.stream import open_streamed
from kvscribe.errors import AudioDecodeError, ExitCode, InputNotFoundError
from tests.conftest import SAMPLE


def test_wav_decodes_to_mono_16k_float32_in_range():
    samples = load_audio(SAMPLE)
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert samples.size == 11 * SAMPLE_RATE  # the clip is exactly 11.000 s at 16 kHz
    assert float(np.abs(samples).mean()) > 0.01 and float(np.abs(samples).max()) <= 1.0


def _envelope_match(samples: np.ndarray, reference: np.ndarray) -> float:
    """Best correlation of 50 ms loudness envelopes over lags up to 100 ms (encoder delay)."""
    frame, best = 800, -1.0
    for lag in range(0, 1601, 16):
        n = min(samples.size - lag, reference.size) // frame * frame
        env_a = np.abs(samples[lag : lag + n]).reshape(-1, frame).mean(axis=1)
        env_b = np.abs(reference[:n]).reshape(-1, frame).mean(axis=1)
        best = max(best, float(np.corrcoef(env_a, env_b)[0, 1]))
    return best


@pytest.mark.parametrize("kind", ["flac", "mp3", "ogg", "m4a", "stereo_wav", "video_mp4"])
def test_other_containers_decode_to_the_same_signal(derived, kind):
    reference = load_audio(SAMPLE)
    samples = load_audio(derived[kind])
    assert abs(samples.size - reference.size) < 0.05 * SAMPLE_RATE  # codec padding only
    assert _envelope_match(samples, reference) > 0.99


def test_envelope_match_tells_different_audio_apart():
    reference = load_audio(SAMPLE)
    assert _envelope_match(reference[::-1].copy(), reference) < 0.5


def test_stereo_is_downmixed_not_one_channel_dropped(derived):
    samples = load_audio(derived["stereo_wav"])
    mono = load_audio(SAMPLE)
    # Identical channels downmix with FFmpeg's -3 dB pan law: louder than either channel.
    ratio = float(np.abs(samples).mean() / np.abs(mono).mean())
    assert 1.3 < ratio < 1.5


@pytest.mark.parametrize(
    ("kind", "error", "words"),
    [
        ("empty", AudioDecodeError, "empty file"),
        ("not_audio", AudioDecodeError, "not an audio"),
        ("header_only", AudioDecodeError, "incomplete: a WAV header with no audio"),
        ("truncated_wav", AudioDecodeError, "incomplete"),
        ("truncated_mp3", AudioDecodeError, "incomplete"),
        ("corrupt_flac", AudioDecodeError, "incomplete"),
        ("zero_samples", AudioDecodeError, "no audio samples"),
    ],
)
@pytest.mark.parametrize("loader", [load_audio, open_streamed], ids=["whole", "streamed"])
def test_broken_files_raise_one_line_errors_naming_the_file(derived, kind, error, words, loader):
    """The streamed path finds every fault in its scan, before any sample is decoded."""
    with pytest.raises(error) as caught:
        loader(derived[kind])
    line = caught.value.one_line()
    assert str(derived[kind]) in line and words in line and "\n" not in line
    assert caught.value.exit_code == ExitCode.AUDIO_UNDECODABLE


@pytest.mark.parametrize("loader", [load_audio, open_streamed], ids=["whole", "streamed"])
def test_missing_file_and_directory_are_input_errors(tmp_path, loader):
    for path, words in [(tmp_path / "nope.wav", "no such file"), (tmp_path, "is a directory")]:
        with pytest.raises(InputNotFoundError, match=words) as caught:
            loader(path)
        assert caught.value.exit_code == ExitCode.INPUT_NOT_FOUND


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_an_input_error(tmp_path):
    path = tmp_path / "locked.wav"
    path.write_bytes(SAMPLE.read_bytes())
    path.chmod(0)
    with pytest.raises(InputNotFoundError, match="permission denied"):
        load_audio(path)


def _without_id3(data: bytes) -> bytes:
    """An MP3 file's frames without its leading ID3v2 tag (10 bytes + a syncsafe size)."""
    if data[:3] != b"ID3":
        return data
    size = (data[6] << 21) | (data[7] << 14) | (data[8] << 7) | data[9]
    return data[10 + size :]


def test_a_stream_that_changes_sample_rate_decodes_whole(tmp_path):
    """Two MP3 files of 22.05 and 44.1 kHz joined (as a cut-and-joined podcast is): FFmpeg's
    decoder changes rate mid-stream, and each run of one rate gets its own resampler. One
    resampler for the whole stream raised PyAV's ValueError (a traceback) at the join."""
    from kvscribe.audio import stream_audio
    from tests import media

    speech = load_audio(SAMPLE)
    parts = [
        media.encode(
            media.resample_linear(speech, rate), rate, tmp_path / f"{rate}.mp3", "libmp3lame"
        )
        for rate in (22050, 44100)
    ]
    joined = tmp_path / "joined.mp3"
    joined.write_bytes(parts[0].read_bytes() + _without_id3(parts[1].read_bytes()))
    decoded = np.concatenate(list(stream_audio(joined)))
    assert decoded.size == pytest.approx(2 * speech.size, rel=0.02)
    # FFmpeg's length of it (33 s) is its size over the first frame's bit rate, a guess: a
    # file run called it truncated ("the header says 33.2 s but only 22.1 s decode").
    assert load_audio(joined).size == decoded.size
    half = decoded.size // 2
    level = float(np.sqrt(np.mean(speech**2)))
    for part in (decoded[:half], decoded[half:]):  # both files' speech, at the original level
        assert float(np.sqrt(np.mean(part**2))) == pytest.approx(level, rel=0.1)
