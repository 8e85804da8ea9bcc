"""The transformers backend on streamed files: the same transcripts as on the whole array.

Real model (the embedded tiny.en, and base where installed, for language detection), real
files decoded by PyAV. A streamed file (kvscribe.audio.stream.open_streamed) must give
segments, times, tokens and words identical to the decoded array of the same file, on the
sequential path (its log-mel a StreamedMel, computed a window at a time) and the batched
one (speech chunks, tails decoded again from the held history), and through the runner's
VAD (a Joined of the streamed file) too.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kvscribe.audio import SAMPLE_RATE, load_audio  # noqa: E402
from kvscribe.audio.mel import FRAMES_PER_WINDOW, HOP, N_FFT  # noqa: E402
from kvscribe.audio.stream import open_streamed  # noqa: E402
from kvscribe.contract import DecodeRequest  # noqa: E402
from kvscribe.decoding import VadFilter  # noqa: E402
from kvscribe.models.embedded import EMBEDDED  # noqa: E402
from tests import loaded  # noqa: E402
from tests.conftest import EVAL_DIR, wer  # noqa: E402
from tests.media import paused_clip  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.transformers, pytest.mark.eval]

SHORT_CLIPS = sorted(EVAL_DIR.glob("ps_*.wav"))  # 34 s of speech in 10 clips


def _backend(profile_name: str = "tiny-vram", model: str | None = None):
    return loaded.backend("transformers", profile_name, model)


def _segments(backend, audio, request: DecodeRequest):
    """Everything a writer reads of each segment, and the run's language and report."""
    run = backend.transcribe(audio, request)
    segments = [
        (
            s.start,
            s.end,
            s.text,
            tuple(s.tokens),
            s.seek,
            s.temperature,
            s.avg_logprob,
            tuple((w.start, w.end, w.word, w.probability) for w in s.words),
        )
        for s in run.segments
    ]
    return segments, (run.language, run.language_probability), run.report


def _whole_file_reference(backend, audio: np.ndarray, request: DecodeRequest):
    """The sequential path as it was before streaming: the whole file's log-mel at once."""
    from kvscribe.audio.mel import log_mel
    from kvscribe.stepped import longform

    mel = log_mel(torch.from_numpy(audio), backend.network.config.num_mel_bins)
    beams = request.beam_size or int(backend.settings.get("beam_size", 5))
    plan = backend._plan("en", request.task, beams, request)
    prompt = backend._prompt_tokens(request)
    stats = longform.WindowStats()
    return [
        (s.start, s.end, s.text, tuple(s.tokens))
        for s in longform.transcribe(plan, mel, backend._text, stats, prompt)
    ]


@pytest.mark.parametrize("words", [False, True])
def test_sequential_path_on_a_streamed_file_equals_the_whole_file(
    monkeypatch, long_form_two_chunks, words
):
    """Also: no call of the front end sees more than one 30 s window of samples, and the
    stream is never turned into one array (StreamedAudio refuses np.asarray)."""
    backend = _backend()
    # Greedy: the stream against the array is the question, and beams would triple the time.
    # 41.2 s: two windows in sequence (the second sought to and prompted from the first's
    # text), at two thirds of the 61.5 s head's three decodes.
    request = DecodeRequest(beam_size=1, batch_size=1, word_timestamps=words)
    streamed = open_streamed(long_form_two_chunks, hold_seconds=0)
    streamed.history = 30 * SAMPLE_RATE  # less than the file, as 60 s is of a long file
    sizes = _front_end_calls(monkeypatch)
    got, language, _ = _segments(backend, streamed, request)
    monkeypatch.undo()
    assert max(sizes) <= (FRAMES_PER_WINDOW - 1) * HOP + N_FFT
    assert sum(sizes) > 2 * streamed.size  # the scan for the maximum, then the windows
    with pytest.raises(TypeError):
        np.asarray(streamed)
    want, want_language, _ = _segments(backend, load_audio(long_form_two_chunks), request)
    assert got == want and language == want_language
    assert len({segment[4] for segment in got}) == 2  # both windows decoded
    assert got[-1][1] > 38  # the whole file was transcribed (its last words end at 41 s)
    # Read forwards: never further back than the 30 s history, so the file is decoded once.
    assert streamed.restarts == 0
    if not words:
        # Before streaming, one log-mel of the whole file: equal to the windows' to float32
        # rounding (tests/test_audio_stream.py), which on some CPUs flips a word, never more.
        reference = _whole_file_reference(backend, load_audio(long_form_two_chunks), request)
        assert wer(" ".join(r[2] for r in reference), " ".join(s[2] for s in got)) <= 0.02


def test_beam_search_and_forced_fallback_on_a_streamed_file(tmp_path):
    """Beam 5 (cpu-laptop) and a logprob rule every window fails, so each is decoded again
    at every temperature by seeded sampling: the same attempt kept either way."""
    from kvscribe.decoding import Fallback

    path = tmp_path / "paused.wav"
    paused_clip(SHORT_CLIPS[:2], 1.5, path)  # two card clips, 7.6 s: one window to fail
    backend = _backend("cpu-laptop")
    strict = Fallback(temperatures=(0.0, 0.5, 1.0), logprob_threshold=-0.05, best_of=2)
    request = DecodeRequest(batch_size=1, word_timestamps=True, fallback=strict)
    got, _, report = _segments(backend, open_streamed(path, hold_seconds=0), request)
    want, _, _ = _segments(backend, load_audio(path), request)
    assert got == want and got
    assert int(report.settings["fallback re-decodes"]) >= 2  # both higher temperatures


@pytest.mark.parametrize("profile_name", ["tiny-vram", "cpu-laptop"])
def test_batched_path_on_a_streamed_file_equals_the_array(long_form_two_chunks, profile_name):
    backend = _backend(profile_name)
    # Greedy on both profiles (tiny-vram's own; cpu-laptop's is beam 5): the stream against
    # the array is the question, and each profile's batch (its KV budget's, or 8) and caches
    # still apply.
    request = DecodeRequest(beam_size=1, word_timestamps=True)
    streamed = open_streamed(long_form_two_chunks, hold_seconds=0)
    got, _, report = _segments(backend, streamed, request)
    want, _, _ = _segments(backend, load_audio(long_form_two_chunks), request)
    assert report.batch_size and report.batch_size > 1  # the batched path ran
    assert len({segment[4] for segment in got}) == 2  # on both chunks
    assert got == want and got[-1][1] > 38  # the last words, ending at 41 s, transcribed
    # The VAD's pass reads the file once, and every group's unfinished tails are read from
    # the history it holds: the file is decoded once.
    assert streamed.restarts == 0


@pytest.mark.parametrize("batch_size", [1, 4])
def test_vad_kept_speech_of_a_streamed_file_equals_it_as_an_array(tmp_path, batch_size):
    """The runner hands a backend without its own VAD the speech joined lazily (a Joined
    of the streamed file): the transcript equals that of the same regions as an array."""
    from kvscribe.voice.regions import speech_only

    path = tmp_path / "paused.wav"
    paused_clip(SHORT_CLIPS, 4.0, path)
    joined, _ = speech_only(open_streamed(path, hold_seconds=0), VadFilter())
    whole = load_audio(path)
    array = np.concatenate([whole[begin:end] for begin, end in joined.regions])
    assert 30 * SAMPLE_RATE < joined.size < whole.size  # silence was cut; still batched
    request = DecodeRequest(batch_size=batch_size, word_timestamps=True)
    got, _, _ = _segments(_backend(), joined, request)
    want, _, _ = _segments(_backend(), array, request)
    assert got == want and got


def _front_end_calls(monkeypatch) -> list[int]:
    """The sample count of every call of the front end from now on."""
    from kvscribe.audio.streamed_mel import TorchFrontEnd

    real, sizes = TorchFrontEnd.log10_mel, []

    def measured(self, framed):
        sizes.append(framed.size)
        return real(self, framed)

    monkeypatch.setattr(TorchFrontEnd, "log10_mel", measured)
    return sizes


@pytest.mark.skipif(not EMBEDDED["base"].installed(), reason="needs the base model")
@pytest.mark.parametrize("batch_size", [1, 4])
def test_language_detected_on_a_streamed_file_equals_the_array(tmp_path, batch_size):
    path = tmp_path / "paused.wav"
    # The five librivox clips with 1.5 s pauses: 34 s, two windows, batched when asked.
    paused_clip([c for c in SHORT_CLIPS if "librivox" in c.name], 1.5, path)
    assert load_audio(path).size > 30 * SAMPLE_RATE
    backend = _backend("tiny-vram", "base")
    request = DecodeRequest(beam_size=1, batch_size=batch_size)  # greedy: detection is asked
    got, language, report = _segments(backend, open_streamed(path, hold_seconds=0), request)
    want, want_language, _ = _segments(backend, load_audio(path), request)
    if batch_size > 1:
        assert report.batch_size and report.batch_size > 1  # batched when asked
    assert language == want_language and language[0] == "en" and language[1] > 0.5
    assert got == want and got
