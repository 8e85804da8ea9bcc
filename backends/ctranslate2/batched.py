"""Batched decoding on CTranslate2: kvscribe's speech chunks through one `generate` call per
batch, with faster-whisper's feature extractor, prompt, suppression and temperature
fallback rules.

Each chunk is decoded without timestamp tokens (as faster-whisper's
`BatchedInferencePipeline` does by default: with them the model skips speech between one
timestamp and the next, and a chunk is never decoded again) and every time comes from
cross-attention alignment of its text (CTranslate2's `align`, as faster-whisper's word
timestamps use); kvscribe.timing.aligned_chunks makes the segments, as for the transformers
backend.

Each chunk's samples are sliced from the input (a StreamedAudio for files: decoded as it
is read; a file of 10 minutes or less is held as its scan decoded it) and its features
computed alone, so nothing the size of a long file is ever held.
On a CPU the rows of a batch are shared out over single-thread replicas of the model
(backends/ctranslate2/replicas.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from kvscribe.adapters import faster_whisper as adapter
from kvscribe.audio.mel import FRAMES_PER_SECOND, FRAMES_PER_WINDOW
from kvscribe.audio.stream import Samples
from kvscribe.backends.ctranslate2.encoder import OnnxEncodedModel
from kvscribe.backends.ctranslate2.replicas import Replicas, rows_of
from kvscribe.chunking import Chunk
from kvscribe.contract import DecodeRequest, DecoderReport
from kvscribe.decoding import Fallback, compression_ratio, per_row, tokens_heard
from kvscribe.timing.aligned_chunks import AlignedChunk, on_original_clock
from kvscribe.timing.timed_words import TimedWord

MEDIAN_FILTER_WIDTH = 7  # openai-whisper's smoothing of the alignment heads' weights
# The stages a batched run times (the stats' "time by stage"); speech chunks are timed by
# the backend, before any group.
STAGE_CHUNKS, STAGE_FEATURES, STAGE_ENCODER = "speech chunks", "features", "encoder"
STAGE_DECODER, STAGE_ALIGNMENT = "decoder", "alignment"


@dataclass(frozen=True)
class BatchSetup:
    engine: object  # faster_whisper.WhisperModel
    replicas: Replicas  # the engine's weights, one replica per CPU thread
    tokenizer: object  # faster_whisper.tokenizer.Tokenizer
    prompt: list[int]
    suppress: list[int]
    max_length: int  # prompt plus the tokens a chunk may decode
    beams: int
    batch: int
    fallback: Fallback
    word_timestamps: bool = False  # whether segments carry their words (always aligned)
    # The request's options CTranslate2's generate() takes as they are, on every attempt.
    generate_options: dict = field(default_factory=dict)


def setup(
    engine, language: str, request: DecodeRequest, beams: int, batch: int, replicas: Replicas
):
    """The batch's prompt (the request's prompt text and hotwords, as faster-whisper's
    transcribe() builds it without timestamps), suppressed tokens and length limit."""
    tokenizer = adapter.tokenizer(engine, request.task, language)
    text = request.prompt
    previous = tokenizer.encode(" " + text.strip()) if text else []
    prompt = adapter.prompt(engine, tokenizer, previous, request.hotwords)
    suppress = adapter.suppressed_tokens(tokenizer, request.suppress_tokens)
    limit = adapter.max_length(engine)
    if request.max_new_tokens is not None:
        limit = min(limit, len(prompt) + request.max_new_tokens)
    plan = BatchSetup(
        engine,
        replicas,
        tokenizer,
        prompt,
        suppress,
        limit,
        beams,
        batch,
        request.fallback,
        request.word_timestamps,
        {"repetition_penalty": request.repetition_penalty},
    )
    return plan, tokenizer


def chunk_features(engine, audio: Samples, chunk: Chunk) -> np.ndarray:
    """The chunk's log-mel, padded (in the feature domain, as faster-whisper does) to 30 s."""
    return adapter.window_features(engine, chunk.samples(audio))


def decode_group(
    plan: BatchSetup,
    audios: Sequence[Samples],
    group: list[Chunk],
    clock: DecoderReport | None = None,
) -> list[AlignedChunk]:
    """Encode and decode `group` (at most `plan.batch` chunks, each of `audios[chunk.source]`)
    in one batch; chunks whose decode fails the fallback rule are decoded again, together,
    at the next temperature. `clock`: the report whose stage times this call adds to."""

    def stage(name: str):
        return clock.stage(name) if clock is not None else contextlib.nullcontext()

    with stage(STAGE_FEATURES):
        features = np.stack(
            [chunk_features(plan.engine, audios[chunk.source], chunk) for chunk in group]
        )
    with stage(STAGE_ENCODER):
        encoded = encode_windows(plan.replicas, features)
    with stage(STAGE_DECODER):
        decoded = _with_fallback(plan, encoded, group)
    with stage(STAGE_ALIGNMENT):
        return _aligned(plan, encoded, group, decoded)


def encode_windows(replicas: Replicas, features: np.ndarray):
    """The group's encoder output. On onnxruntime (backends/ctranslate2/encoder.py) the
    windows go one at a time through its one session, on every thread. On CTranslate2's
    CPU encoder a window at a time, the replicas taking one each (a lone window goes to
    the every-thread engine, which that choice loads with the model): the encoder's
    attention scratch grows with the windows encoded together (tiny, 8 windows: about
    0.4 GB more peak RSS) while the work is the same, and a short file would otherwise
    peak lower than a long one only because it fills fewer rows. On a GPU the batch stays
    whole."""
    import ctranslate2

    engine = replicas.engine
    if engine.model.device != "cpu" or isinstance(engine.model, OnnxEncodedModel):
        return adapter.encode(engine, features)
    if len(features) == 1 and replicas.whole_started:
        return adapter.encode(replicas.whole, features)
    rows = replicas.map(
        lambda window: np.asarray(adapter.encode(engine, window[None])), list(features)
    )
    return ctranslate2.StorageView.from_array(np.concatenate(rows))


def _with_fallback(plan: BatchSetup, encoded, group: list[Chunk]) -> list[AlignedChunk]:
    """faster-whisper's generate_with_fallback, per row of a batch (a row's seconds of audio
    guide how long its decode runs; a stretch read again gets one attempt: per_row)."""
    rows = len(group)
    seconds = [chunk.seconds for chunk in group]

    def attempt(pending: list[int], _round: int, temperature: float) -> list[AlignedChunk]:
        subset = encoded if len(pending) == rows else rows_of(encoded, pending)  # rare
        return _generate(plan, subset, [seconds[row] for row in pending], temperature)

    return per_row(plan.fallback, rows, attempt, [chunk.reread for chunk in group])


def _generate(
    plan: BatchSetup, encoded, weights: list[float], temperature: float
) -> list[AlignedChunk]:
    """One attempt for each row (`weights`: each row's seconds of audio), at most as many
    tokens as the longest row's audio can hold (tokens_heard): the rows a fallback decodes
    again are mostly short tails, and a repeating sample of one ran to the window's limit."""
    rows = len(weights)
    max_length = min(plan.max_length, len(plan.prompt) + tokens_heard(max(weights)))
    if temperature > 0:
        search = {
            "beam_size": 1,
            "num_hypotheses": plan.fallback.best_of,
            "sampling_topk": 0,
            "sampling_temperature": temperature,
        }
    else:
        search = {"beam_size": plan.beams}
    options = {
        "max_length": max_length,
        "suppress_blank": True,
        "suppress_tokens": plan.suppress,
        "return_scores": True,
        "return_no_speech_prob": True,
        **plan.generate_options,
        **search,
    }
    prompts = [list(plan.prompt) for _ in range(rows)]
    sampled = temperature > 0  # on one generator, see replicas
    if sampled or not plan.replicas.split(rows):
        engine = plan.replicas.decoder(rows, sampled)
        results = engine.model.generate(encoded, prompts, **options)
    else:
        replicas = plan.replicas
        results = replicas.over_rows(
            lambda share: replicas.engine.model.generate(
                rows_of(encoded, share), [prompts[row] for row in share], **options
            ),
            rows,
            weights,
        )
    return [_decoded(plan, result, temperature, max_length) for result in results]


def _decoded(plan: BatchSetup, result, temperature: float, max_length: int) -> AlignedChunk:
    tokens = list(result.sequences_ids[0])
    total_logprob = result.scores[0] * len(tokens)  # scores are length-normalised
    text = plan.tokenizer.decode(tokens).strip()
    return AlignedChunk(
        tokens,
        total_logprob / (len(tokens) + 1),
        result.no_speech_prob,
        temperature=temperature,
        compression_ratio=compression_ratio(text),
        cut_short=len(tokens) >= max_length - len(plan.prompt),
    )


# -- words ------------------------------------------------------------------------------


def _aligned(
    plan: BatchSetup, encoded, group: list[Chunk], decoded: list[AlignedChunk]
) -> list[AlignedChunk]:
    """Each spoken chunk's words, timed by cross-attention alignment (`_alignments`),
    punctuation glued to its word as faster-whisper glues it."""
    rows = [
        row
        for row, result in enumerate(decoded)
        if result.tokens and not plan.fallback.is_silence(result.no_speech_prob, result.avg_logprob)
    ]
    if not rows:
        return decoded
    alignments = _alignments(
        plan,
        encoded if len(rows) == len(group) else rows_of(encoded, rows),
        [decoded[row].tokens for row in rows],
        [min(FRAMES_PER_WINDOW, round(group[row].seconds * FRAMES_PER_SECOND)) for row in rows],
    )
    aligned = list(decoded)
    for row, alignment in zip(rows, alignments, strict=True):
        adapter.merge_punctuations(alignment)
        words = [_timed(word) for word in alignment if word["word"]]
        aligned[row] = replace(decoded[row], words=on_original_clock(words, group[row]))
    return aligned


def _alignments(plan: BatchSetup, encoded, tokens: list[list[int]], frames: list[int]) -> list:
    """CTranslate2's alignment of each row, the rows shared out over the replicas. On a CPU
    each row is aligned in a call of its own: a call of several rows pads them all to the
    longest text and filters and aligns the padding too (tiny.en, 4 rows of 13-73 tokens on
    one thread: 0.28-0.34 s together, 0.15-0.18 s one at a time)."""
    replicas = plan.replicas
    alone = encoded.device == "cpu"

    def align(engine, share: list[int]) -> list:
        calls = [[row] for row in share] if alone else [share]
        found = []
        for rows in calls:
            found += adapter.align(
                engine,
                plan.tokenizer,
                [tokens[row] for row in rows],
                encoded if len(rows) == len(tokens) else rows_of(encoded, rows),
                [frames[row] for row in rows],
                MEDIAN_FILTER_WIDTH,
            )
        return found

    if not replicas.split(len(tokens)):
        return align(plan.engine, list(range(len(tokens))))
    weights = [len(row) for row in tokens]  # the work: tokens
    return replicas.over_rows(lambda share: align(replicas.engine, share), len(tokens), weights)


def _timed(word: dict) -> TimedWord:
    return TimedWord(
        float(word["start"]),
        float(word["end"]),
        word["word"],
        float(word["probability"]),
        tuple(word["tokens"]),
    )
