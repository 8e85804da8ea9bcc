"""Batched decoding on CTranslate2: kvscribe's speech chunks through one `generate` call per
batch, with faster-whisper's feature extractor, prompt, suppression, temperature fallback
and word alignment rules.

Not faster-whisper's `BatchedInferencePipeline`: that drops the text after a chunk's last
timestamp pair (it seeks as a sequential window would, but a chunk is never revisited),
decodes at one temperature only, and this path shares kvscribe's chunker and segment rules
with the transformers backend.

Each chunk's samples are sliced from the input (a StreamedAudio for files: decoded as it
is read) and its features computed alone, so nothing the size of the file is ever held;
the backend asks the stream to keep a group's span behind its reads, for the tails that
are decoded again after the group (kvscribe.chunking.unfinished).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio_stream import Samples
from kvscribe.chunking import Chunk, ChunkResult, chunk_pieces, chunk_segments
from kvscribe.decoding import Fallback, compression_ratio
from kvscribe.types import Segment, Word

MAX_INITIAL_TIMESTAMP_INDEX = 50  # the first timestamp is at most 1.00 s (faster-whisper's rule)
FRAMES_PER_SECOND = 100  # mel frames; Segment.seek counts these


@dataclass
class _SpeechClock:
    """The end of the last word aligned so far (faster-whisper's `last_speech_timestamp`,
    which shortens a first word that follows a long pause)."""

    last_word_end: float = 0.0


@dataclass(frozen=True)
class BatchSetup:
    engine: object  # faster_whisper.WhisperModel
    tokenizer: object  # faster_whisper.tokenizer.Tokenizer
    prompt: list[int]
    suppress: list[int]
    beams: int
    batch: int
    fallback: Fallback
    word_timestamps: bool = False
    clock: _SpeechClock = field(default_factory=_SpeechClock)


@dataclass(frozen=True)
class DecodedChunk(ChunkResult):
    """A chunk's accepted decode, with what fallback and word alignment add to it."""

    temperature: float = 0.0
    compression_ratio: float = 0.0
    # One entry per piece of `chunk_pieces(tokens, ...)`: (start s, end s, words), on the
    # original clock, spans adjusted to the words as faster-whisper adjusts its segments.
    aligned: tuple[tuple[float, float, tuple[Word, ...]], ...] = ()


def setup(
    engine,
    language: str,
    task: str,
    prompt_text: str | None,
    beams: int,
    batch: int,
    fallback: Fallback,
    word_timestamps: bool = False,
):
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    tokenizer = Tokenizer(engine.hf_tokenizer, engine.model.is_multilingual, task, language)
    previous = tokenizer.encode(" " + prompt_text.strip()) if prompt_text else []
    prompt = engine.get_prompt(tokenizer, previous_tokens=previous, without_timestamps=False)
    suppress = get_suppressed_tokens(tokenizer, [-1])
    plan = BatchSetup(engine, tokenizer, prompt, suppress, beams, batch, fallback, word_timestamps)
    return plan, tokenizer


def chunk_features(engine, audio: Samples, chunk: Chunk) -> np.ndarray:
    """The chunk's log-mel, padded (in the feature domain, as faster-whisper does) to 30 s."""
    from faster_whisper.audio import pad_or_trim

    return pad_or_trim(engine.feature_extractor(audio[chunk.start : chunk.end])[..., :-1])


def decode_group(plan: BatchSetup, audio: Samples, group: list[Chunk]) -> list[DecodedChunk]:
    """Encode and decode `group` (at most `plan.batch` chunks) in one batch; chunks whose
    decode fails the fallback rule are decoded again, together, at the next temperature."""
    features = np.stack([chunk_features(plan.engine, audio, chunk) for chunk in group])
    encoded = _encode(plan.engine, features)
    decoded = _with_fallback(plan, encoded, len(group))
    if plan.word_timestamps:
        decoded = _align_words(plan, encoded, group, decoded)
    return decoded


def _encode(engine, features: np.ndarray):
    """The group's encoder output. On the CPU a window at a time: the encoder's attention
    scratch grows with the windows encoded together (tiny, 8 windows: about 0.4 GB more
    peak RSS) while the work is the same, and a short file would otherwise peak lower
    than a long one only because it fills fewer rows. On a GPU the batch stays whole."""
    import ctranslate2

    if engine.model.device != "cpu" or len(features) == 1:
        return engine.encode(features)
    rows = [np.asarray(engine.encode(window[None])) for window in features]
    return ctranslate2.StorageView.from_array(np.concatenate(rows))


def _with_fallback(plan: BatchSetup, encoded, rows: int) -> list[DecodedChunk]:
    """faster-whisper's generate_with_fallback, per row of a batch."""
    temperatures = plan.fallback.temperatures or (0.0,)
    tried: list[list[DecodedChunk]] = [[] for _ in range(rows)]
    accepted: list[DecodedChunk | None] = [None] * rows
    pending = list(range(rows))
    for temperature in temperatures:
        subset = encoded if len(pending) == rows else _rows_of(encoded, pending)
        for row, result in zip(
            pending, _generate(plan, subset, len(pending), temperature), strict=True
        ):
            tried[row].append(result)
            if not _needs_fallback(plan.fallback, result):
                accepted[row] = result
        pending = [row for row in pending if accepted[row] is None]
        if not pending:
            break
    return [found or _best_failed(plan.fallback, tried[row]) for row, found in enumerate(accepted)]


def _needs_fallback(fallback: Fallback, result: DecodedChunk) -> bool:
    if fallback.is_silence(result.no_speech_prob, result.avg_logprob):
        return False  # silence is dropped, not retried
    return fallback.needs_retry(result.compression_ratio, result.avg_logprob)


def _best_failed(fallback: Fallback, tried: list[DecodedChunk]) -> DecodedChunk:
    """Every temperature failed: the likeliest decode that is not repetitive, else the
    likeliest (faster-whisper's choice)."""
    limit = fallback.compression_ratio_threshold
    fluent = [r for r in tried if limit is None or r.compression_ratio <= limit]
    return max(fluent or tried, key=lambda r: r.avg_logprob)


def _generate(plan: BatchSetup, encoded, rows: int, temperature: float) -> list[DecodedChunk]:
    if temperature > 0:
        search = {
            "beam_size": 1,
            "num_hypotheses": plan.fallback.best_of,
            "sampling_topk": 0,
            "sampling_temperature": temperature,
        }
    else:
        search = {"beam_size": plan.beams}
    results = plan.engine.model.generate(
        encoded,
        [list(plan.prompt) for _ in range(rows)],
        max_length=plan.engine.max_length,
        suppress_blank=True,
        suppress_tokens=plan.suppress,
        return_scores=True,
        return_no_speech_prob=True,
        max_initial_timestamp_index=MAX_INITIAL_TIMESTAMP_INDEX,
        **search,
    )
    return [_decoded(plan, result, temperature) for result in results]


def _decoded(plan: BatchSetup, result, temperature: float) -> DecodedChunk:
    tokens = list(result.sequences_ids[0])
    total_logprob = result.scores[0] * len(tokens)  # scores are length-normalised
    text = plan.tokenizer.decode(tokens).strip()
    return DecodedChunk(
        tokens,
        total_logprob / (len(tokens) + 1),
        result.no_speech_prob,
        temperature=temperature,
        compression_ratio=compression_ratio(text),
    )


def _rows_of(encoded, rows: list[int]):
    """Those rows of an encoder output, as a new StorageView (only fallback retries and
    alignment subsets need this, so the copy through the host is rare)."""
    import ctranslate2

    if encoded.device != "cpu":
        encoded = encoded.to_device(ctranslate2.Device.cpu)
    return ctranslate2.StorageView.from_array(np.ascontiguousarray(np.asarray(encoded)[rows]))


# -- words ------------------------------------------------------------------------------


def _align_words(
    plan: BatchSetup, encoded, group: list[Chunk], decoded: list[DecodedChunk]
) -> list[DecodedChunk]:
    """faster-whisper's add_word_timestamps over the batch: cross-attention alignment of each
    chunk's text tokens, punctuation merged, word and segment spans adjusted alike."""
    timestamp_begin = plan.tokenizer.timestamp_begin
    pieces = [
        [
            {
                # seek may be fractional: time_offset = seek / 100 is then the chunk's exact start
                "seek": chunk.start * FRAMES_PER_SECOND / SAMPLE_RATE,
                "start": chunk.start_seconds + start,
                "end": chunk.start_seconds + end,
                "tokens": tokens,
            }
            for start, end, tokens in chunk_pieces(result.tokens, timestamp_begin, chunk.seconds)
        ]
        for chunk, result in zip(group, decoded, strict=True)
    ]
    worded = [row for row, chunk_pieces_ in enumerate(pieces) if chunk_pieces_]
    if not worded:
        return decoded
    plan.clock.last_word_end = plan.engine.add_word_timestamps(
        [pieces[row] for row in worded],
        plan.tokenizer,
        encoded if len(worded) == len(group) else _rows_of(encoded, worded),
        [min(3000, round(group[row].seconds * FRAMES_PER_SECOND)) for row in worded],
        *_punctuations(),
        plan.clock.last_word_end,
    )
    return [
        replace(result, aligned=tuple(_aligned(piece) for piece in pieces[row]))
        for row, result in enumerate(decoded)
    ]


def _punctuations() -> tuple[str, str]:
    """faster-whisper's transcribe() defaults for gluing punctuation to the words beside it."""
    import inspect

    from faster_whisper import WhisperModel

    parameters = inspect.signature(WhisperModel.transcribe).parameters
    return parameters["prepend_punctuations"].default, parameters["append_punctuations"].default


def _aligned(piece: dict) -> tuple[float, float, tuple[Word, ...]]:
    words = tuple(
        Word(float(w["start"]), float(w["end"]), w["word"], float(w["probability"]))
        for w in piece.get("words", ())
    )
    return float(piece["start"]), float(piece["end"]), words


# -- segments ---------------------------------------------------------------------------


def segments_of(
    plan: BatchSetup, chunk: Chunk, index: int, result: DecodedChunk, first_id: int
) -> list[Segment]:
    """The chunk's segments on the original clock (kvscribe.chunking's rules), with the
    request's silence rule, the decode's temperature and compression ratio, its window start
    as `seek` and, when asked for, its words."""
    from kvscribe.backends.ct2_silence import unspoken

    if plan.fallback.is_silence(result.no_speech_prob, result.avg_logprob):
        return []
    tokenizer = plan.tokenizer
    # chunk_segments applies the default silence rule; the request's rule was applied above.
    spoken = replace(result, no_speech_prob=0.0)
    segments = chunk_segments(
        chunk,
        index,
        spoken,
        (tokenizer.eot, tokenizer.timestamp_begin),
        tokenizer.decode,
        first_id,
    )
    aligned = _aligned_by_tokens(plan, chunk, result)
    finished = []
    for segment in segments:
        if unspoken(plan.fallback, result.no_speech_prob, result.temperature, segment.text):
            continue
        spans = aligned.get(segment.tokens)
        start, end, words = spans.pop(0) if spans else (segment.start, segment.end, ())
        finished.append(
            replace(
                segment,
                id=first_id + len(finished),
                start=start,
                end=end,
                no_speech_prob=result.no_speech_prob,
                seek=round(chunk.start * FRAMES_PER_SECOND / SAMPLE_RATE),
                temperature=result.temperature,
                compression_ratio=result.compression_ratio,
                words=words,
            )
        )
    return finished


def _aligned_by_tokens(
    plan: BatchSetup, chunk: Chunk, result: DecodedChunk
) -> dict[tuple[int, ...], list[tuple[float, float, tuple[Word, ...]]]]:
    """Aligned spans keyed by their piece's tokens (chunk_segments skips empty pieces, so
    position alone cannot pair them), in order for pieces that repeat."""
    if not result.aligned:
        return {}
    pieces = chunk_pieces(result.tokens, plan.tokenizer.timestamp_begin, chunk.seconds)
    spans: dict[tuple[int, ...], list] = {}
    for (_, _, tokens), span in zip(pieces, result.aligned, strict=True):
        spans.setdefault(tuple(tokens), []).append(span)
    return spans
