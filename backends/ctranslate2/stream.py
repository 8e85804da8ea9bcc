"""faster-whisper's sequential `transcribe` over audio it never holds whole.

`WhisperModel.transcribe(audio)` computes the log-mel of the entire input first (about
50 MB a minute of audio) and then reads it only as `features.shape[-1]`,
`features[:, a:b]` (one window) and `features[..., seek:]` (language detection).
A `StreamedMel` answers exactly those, computing a window's frames when they are read.
Its values equal the whole-file features up to float32 rounding (the mel projection's
BLAS kernel, and so its summation order, depends on the slice's shape and the CPU), so
on some machines a word can differ from faster-whisper's own run on the same array.
kvscribe therefore computes features this one way for every input, a file read in
slices or an array (live mode, stdin, tests): the same samples give the same transcript.

How it reaches faster-whisper: `transcribe` is called on a shallow copy of the engine
whose `feature_extractor` returns the StreamedMel for a zero-memory stand-in array of
the input's length (`np.broadcast_to`: an ndarray with the right shape, no samples).
 - Not `generate_segments` called directly: `transcribe` also detects the language, builds
   the tokenizer and fills TranscriptionOptions (about 30 fields that change between
   faster-whisper releases); calling it keeps all of that faster-whisper's own.
 - A copy, not the shared engine's extractor swapped and put back: segments are generated
   lazily after `transcribe` returns, and nothing else using the engine meanwhile (another
   thread, a second transcription) can ever see the stand-in. The copy shares the loaded
   model and tokenizer; only its attribute dict is new.
 - The wrapper answers only for the stand-in (and faster-whisper's own arguments); any
   other call, and every attribute, goes to the real extractor. Were a faster-whisper
   release to read the stand-in's samples (zeros), the transcripts would no longer match
   the array's, which tests/test_ct2_streaming.py compares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from kvscribe.adapters import faster_whisper as adapter
from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.mel import FRAMES_PER_SECOND
from kvscribe.audio.stream import Samples
from kvscribe.audio.streamed_mel import NumpyFrontEnd, StreamedMel
from kvscribe.backends.ctranslate2.windows import WindowCounter
from kvscribe.contract import DecodeRequest
from kvscribe.decoding import Fallback, unspoken
from kvscribe.types import Segment, Word

_DEFAULT_PADDING = 160  # FeatureExtractor.__call__'s, which NumpyFrontEnd reproduces


def transcribe(engine, audio: Samples, encoder_frames: int | None = None, **options):
    """`engine.transcribe(audio, **options)` (segments, info) for any Samples, arrays
    included, through its streamed log-mel (`vad_filter` must be off: the caller
    filters, block-fed, before); `encoder_frames`: encode each window's first frames only
    (adapter.with_encoder_frames)."""
    if options.get("vad_filter"):
        raise ValueError(
            "streamed audio is VAD-filtered before transcribe (ctranslate2/silence.py)"
        )
    extractor = adapter.feature_extractor(engine)
    mel = StreamedMel(audio, NumpyFrontEnd(extractor))
    standin = np.broadcast_to(np.float32(0), (audio.size,))
    view = adapter.with_feature_extractor(engine, _FeaturesFor(extractor, standin, mel))
    if encoder_frames is not None:
        view = adapter.with_encoder_frames(view, encoder_frames)
    return view.transcribe(standin, **options)


def transcribe_options(request: DecodeRequest, beams: int, conditioned: bool) -> dict:
    """faster-whisper's `transcribe` arguments for `request` (the audio aside)."""
    fallback = request.fallback
    return {
        "language": request.language,
        "task": request.task,
        "beam_size": beams,
        "best_of": fallback.best_of,
        "temperature": list(fallback.temperatures or (0.0,)),
        "compression_ratio_threshold": fallback.compression_ratio_threshold,
        "log_prob_threshold": fallback.logprob_threshold,
        "no_speech_threshold": fallback.no_speech_threshold,
        "condition_on_previous_text": conditioned,
        "initial_prompt": request.prompt or None,
        "word_timestamps": request.word_timestamps,
        "vad_filter": False,  # done by the caller (block-fed), to restore times better
        "hotwords": request.hotwords,
        "max_new_tokens": request.max_new_tokens,
        "suppress_tokens": list(request.suppress_tokens),
        "hallucination_silence_threshold": request.hallucination_silence_threshold,
        "repetition_penalty": request.repetition_penalty,
    }


class _FeaturesFor:
    """A FeatureExtractor that returns `mel` for `standin` and is the real one otherwise."""

    def __init__(self, extractor, standin: np.ndarray, mel: StreamedMel):
        self._extractor = extractor
        self._standin = standin
        self._mel = mel

    def __call__(self, waveform, padding=_DEFAULT_PADDING, chunk_length=None):
        if waveform is self._standin:
            if padding != _DEFAULT_PADDING or chunk_length is not None:
                raise ValueError("streamed features use faster-whisper's default framing")
            return self._mel
        return self._extractor(waveform, padding=padding, chunk_length=chunk_length)

    def __getattr__(self, name: str):
        return getattr(self._extractor, name)


def segments(
    raw: Iterator, windows: WindowCounter, fallback: Fallback, with_words: bool
) -> Iterator[Segment]:
    """faster-whisper's segments as kvscribe's, numbered from 0, each counted in `windows`;
    those the model itself judges unspoken (kvscribe.decoding.unspoken) left out; their
    words only `with_words` (the sequential path aligns for itself: stretched.py)."""
    kept = 0
    for seg in raw:
        windows.add(seg.seek, len(seg.tokens))
        if unspoken(fallback, seg.no_speech_prob, seg.temperature, seg.text):
            continue
        kept += 1
        yield Segment(
            kept - 1,
            float(seg.start),
            float(seg.end),
            seg.text,
            tuple(seg.tokens),
            seg.avg_logprob,
            seg.no_speech_prob,
            windows.count - 1,
            seek=int(seg.seek),
            temperature=float(seg.temperature),
            compression_ratio=float(seg.compression_ratio),
            words=tuple(_word(w) for w in seg.words or ()) if with_words else (),
        )


def _word(word) -> Word:
    return Word(float(word.start), float(word.end), word.word, float(word.probability))


def shifted(segments: Iterator, at: int) -> Iterator:
    """faster-whisper's segments of audio from sample `at` on, on the whole input's clock."""
    seconds = at / SAMPLE_RATE
    frames = round(seconds * FRAMES_PER_SECOND)
    for segment in segments:
        words = segment.words and [
            dataclasses.replace(w, start=w.start + seconds, end=w.end + seconds)
            for w in segment.words
        ]
        yield dataclasses.replace(
            segment,
            seek=segment.seek + frames,
            start=segment.start + seconds,
            end=segment.end + seconds,
            words=words,
        )
