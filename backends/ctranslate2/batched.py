"""Batched decoding on CTranslate2: kvscribe's speech chunks through one `generate` call per
batch (backends/ctranslate2/generate.py), with faster-whisper's feature extractor, prompt,
suppression and temperature fallback rules.

Each chunk is decoded without timestamp tokens (as faster-whisper's
`BatchedInferencePipeline` does by default: with them the model skips speech between one
timestamp and the next, and a chunk is never decoded again) and every time comes from
cross-attention alignment of its text (CTranslate2's `align`, as faster-whisper's word
timestamps use); kvscribe.aligned_chunks makes the segments, as for the transformers
backend.

Each chunk's samples are sliced from the input (a StreamedAudio for files: decoded as it
is read; a file of 10 minutes or less is held as its scan decoded it) and its features
computed alone, so nothing the size of a long file is ever held.
On a CPU the rows of a batch are shared out over single-thread replicas of the model
(backends/ctranslate2/replicas.py).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from kvscribe import worker_threads
from kvscribe.adapters import faster_whisper as adapter
from kvscribe.aligned_chunks import AlignedChunk
from kvscribe.audio.stream import Samples
from kvscribe.backends.ctranslate2 import generate as rows_decode
from kvscribe.backends.ctranslate2 import word_times
from kvscribe.backends.ctranslate2.group_encoding import (
    STAGE_ENCODER,
    EncodedAhead,
    EncodedRows,
    SpreadRows,
    chunk_features,
    encode_alone,
    encode_group,
    encode_windows,
    spread_encoder,
)
from kvscribe.backends.ctranslate2.replicas import Replicas, rows_of
from kvscribe.chunking import Chunk
from kvscribe.contract import DecodeRequest, DecoderReport
from kvscribe.decoding import Fallback, per_row, tokens_heard
from kvscribe.rereads import FirstRereads

# The stages a batched run times (the stats' "time by stage"); speech chunks are timed by
# the backend, before any group.
STAGE_CHUNKS, STAGE_DECODER, STAGE_ALIGNMENT = "speech chunks", "decoder", "alignment"


@dataclass(frozen=True)
class BatchSetup:
    engine: object  # faster_whisper.WhisperModel
    replicas: Replicas  # the engine's weights, one replica per CPU thread
    tokenizer: object  # faster_whisper.tokenizer.Tokenizer
    prompt: list[int]  # a row's prompt without previous text: the request's prompt, hotwords
    suppress: list[int]
    text_limit: int  # the prompt plus the tokens a row decodes: the model's text context
    beams: int
    batch: int
    fallback: Fallback
    word_timestamps: bool = False  # whether segments carry their words (always aligned)
    # The request's options CTranslate2's generate() takes as they are, on every attempt.
    generate_options: dict = field(default_factory=dict)
    hotwords: str | None = None  # put before a row's previous text (generate.row_prompts)
    max_new_tokens: int | None = None  # the request's bound on the tokens a row decodes


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
    plan = BatchSetup(
        engine,
        replicas,
        tokenizer,
        prompt,
        suppress,
        adapter.max_length(engine),
        beams,
        batch,
        request.fallback,
        request.word_timestamps,
        {"repetition_penalty": request.repetition_penalty},
        request.hotwords,
        request.max_new_tokens,
    )
    return plan, tokenizer


def decode_group(
    plan: BatchSetup,
    audios: Sequence[Samples],
    group: list[Chunk],
    clock: DecoderReport | None = None,
    ahead: EncodedAhead | None = None,
    rereads: FirstRereads | None = None,
    previous: Sequence[list[int]] | None = None,
) -> list[AlignedChunk]:
    """Encode and decode `group` (at most `plan.batch` chunks, each of `audios[chunk.source]`)
    in one batch; chunks whose decode fails the fallback rule are decoded again, together,
    at the next temperature. `previous`: each row's previous text, its prompt at every
    attempt (generate.row_prompts; None: the plan's prompt). `clock`: the report whose stage times
    this call adds to; `ahead`: rows encoded already (language detection's), taken
    instead of encoding them;
    `rereads`: where the rows are shared out over replicas, each share's skipped stretches
    are read on its replica as soon as its rows are aligned (`_read_claimed`)."""

    def stage(name: str):
        return clock.stage(name) if clock is not None else contextlib.nullcontext()

    overlapped = _overlapped(plan, len(group))
    claim = None
    if overlapped and rereads is not None:
        claim = functools.partial(_read_claimed, plan, audios, rereads)
    spread = spread_encoder(plan.replicas) if overlapped else None
    if spread is not None:
        rows = SpreadRows(spread, plan.replicas.engine, audios, group, ahead)
        return _decoded_and_aligned(plan, rows, group, stage, claim, previous)
    encoded = worker_threads.off_main(encode_group, plan.replicas, audios, group, ahead, stage)
    if overlapped:
        return _decoded_and_aligned(plan, EncodedRows(encoded), group, stage, claim, previous)
    with stage(STAGE_DECODER):
        decoded = worker_threads.off_main(_with_fallback, plan, encoded, group, previous)
    with stage(STAGE_ALIGNMENT):
        return worker_threads.off_main(word_times.aligned, plan, encoded, group, decoded)


def _with_fallback(
    plan: BatchSetup, encoded, group: list[Chunk], previous: Sequence[list[int]] | None = None
) -> list[AlignedChunk]:
    """faster-whisper's generate_with_fallback, per row of a batch (a row's seconds of audio
    guide how long its decode runs; a stretch read again gets one attempt: per_row)."""
    rows = len(group)
    seconds = [chunk.seconds for chunk in group]

    def attempt(pending: list[int], _round: int, temperature: float) -> list[AlignedChunk]:
        subset = encoded if len(pending) == rows else rows_of(encoded, pending)  # rare
        weights = [seconds[row] for row in pending]
        return rows_decode.generate(
            plan, subset, weights, temperature, rows_decode.picked(previous, pending)
        )

    return per_row(plan.fallback, rows, attempt, [chunk.reread for chunk in group])


# -- decoding and alignment side by side -------------------------------------------------


def _overlapped(plan: BatchSetup, rows: int) -> bool:
    """Whether a group's rows are decoded and aligned side by side (`_decoded_and_aligned`):
    on CPU replicas (there are none on a GPU), several rows, the first attempt a beam
    search (a sampled one runs on the every-thread engine)."""
    first = (plan.fallback.temperatures or (0.0,))[0]
    return plan.replicas.split(rows) and first == 0


def _decoded_and_aligned(
    plan: BatchSetup,
    encoded: EncodedRows | SpreadRows,
    group: list[Chunk],
    stage: Callable,
    claim: Callable[[list[int], list[AlignedChunk], bool], None] | None = None,
    previous: Sequence[list[int]] | None = None,
) -> list[AlignedChunk]:
    """The group decoded and aligned on the replicas with no wait between the two stages.
    Each replica decodes its share of the rows at the first temperature, then aligns rows
    one call each: its own as soon as they are decoded, then any row still waiting,
    another share's included. With a wait between the stages, the replica whose share
    finished first sat idle until the other's had too, and again at the alignment's end
    (espeak long-form, tiny.en, 2 threads: 0.17 s and 0.06 s of one core). The text and
    times are the same: the same calls on the same replicas. Rows the fallback decodes
    again (rare) are aligned after their last attempt. In the stats, the decoder's time
    runs until every row is decoded (alignments made meanwhile inside it), the
    alignment's from there to the last row aligned.

    Where the rows spread (`SpreadRows`), each replica first encodes its queue (its share's
    rows, the shares dealt by that work too, less any encodes moved to a lighter share's
    replica: `SpreadRows.queues`) and decodes once its share's rows are all encoded; the
    encoder's time runs until every row is encoded (a row's features computed there and
    timed with it, decodes begun meanwhile inside it).

    `claim(share, results, busy)` is called, on the replica that finished it, once every row
    of a share is decoded at its first attempt and aligned: its skipped stretches are read
    beside the other share's decode, where after the group one core sat idle. `busy`:
    whether other rows or shares were still at work then. It runs inside whichever stage
    waits on it."""
    replicas, rows = plan.replicas, len(group)
    seconds = [chunk.seconds for chunk in group]
    heard = tokens_heard(max(seconds))
    first: list = [None] * rows
    aligning: dict[int, Future] = {}
    shares = replicas.shares(rows, encoded.weights(seconds))
    share_of = {row: number for number, share in enumerate(shares) for row in share}
    final: list = [None] * rows
    unfinished = [len(share) for share in shares]
    claiming = [0]  # shares whose stretches are being read now
    lock = threading.Lock()

    def finished(row: int, result: AlignedChunk) -> AlignedChunk:
        final[row] = result
        with lock:
            unfinished[share_of[row]] -= 1
            complete = claim is not None and unfinished[share_of[row]] == 0
            busy = sum(unfinished) > 0 or claiming[0] > 0  # other work on the cores
            claiming[0] += complete
        if complete:
            share = shares[share_of[row]]
            try:
                claim(share, [final[r] for r in share], busy)
            finally:
                with lock:
                    claiming[0] -= 1
        return result

    def align(row: int, attempt: AlignedChunk) -> AlignedChunk:
        return finished(row, word_times.align_row(plan, encoded, group, row, attempt))

    single = len(plan.fallback.temperatures or (0.0,)) == 1  # no fallback round

    def settled(row: int) -> bool:  # per_row's rule after the first round
        return group[row].reread or single or plan.fallback.is_final(first[row])

    def decode(share: list[int], queue: list[int], encoded_share: Future) -> None:
        try:
            encoded.encode(queue)
        except BaseException as exc:
            encoded.fail(exc)
            encoded_share.set_exception(exc)
            raise
        encoded_share.set_result(None)
        encoded.wait_for(share)
        model = replicas.engine.model
        attempts = rows_decode.attempts(
            plan, model, encoded.of(share), heard, 0.0, rows_decode.picked(previous, share)
        )
        for row, attempt in zip(share, attempts, strict=True):
            first[row] = attempt
            if settled(row) and word_times.alignable(plan, attempt):
                aligning[row] = pool.submit(align, row, attempt)
            elif settled(row):
                finished(row, attempt)

    queues = encoded.queues(shares, seconds)
    encoding = [Future() for _ in shares]
    with worker_threads.pool(replicas.workers) as pool:
        decoding = [
            pool.submit(decode, *work) for work in zip(shares, queues, encoding, strict=True)
        ]
        timed = stage(STAGE_ENCODER) if encoded.encodes_shares else contextlib.nullcontext()
        with timed:
            for share in encoding:
                worker_threads.result(share)
        with stage(STAGE_DECODER):
            for share in decoding:
                worker_threads.result(share)
            unsettled = [row for row in range(rows) if not settled(row)]
            again = _retried(plan, encoded, group, unsettled, first, previous)
            for row, attempt in again.items():
                if word_times.alignable(plan, attempt):
                    aligning[row] = pool.submit(
                        word_times.align_row, plan, encoded, group, row, attempt
                    )
        with stage(STAGE_ALIGNMENT):
            decoded = [again.get(row, first[row]) for row in range(rows)]
            return [
                worker_threads.result(aligning[r]) if r in aligning else decoded[r]
                for r in range(rows)
            ]


def _read_claimed(
    plan: BatchSetup,
    audios: Sequence[Samples],
    rereads: FirstRereads,
    rows: list[int],
    results: list[AlignedChunk],
    busy: bool,
) -> None:
    """Those rows' skipped stretches, packed (FirstRereads.claim) and each pack read alone on
    the calling replica, as `decode_group` reads a pack after the group (a stretch read
    again gets one attempt). Its window is encoded on this thread alone while other work
    holds the other cores (`busy`), else on every thread (the last share's stretches:
    the noisy telephone recording with tiny.en, 0.13 s on one thread against 0.07); the
    output is the same either way."""
    for chunk in rereads.claim(rows, results):
        features = chunk_features(plan.engine, audios[chunk.source], chunk)
        if busy:
            encoded = encode_alone(plan.replicas, features)
        else:
            encoded = encode_windows(plan.replicas, features[None])
        decoded = _with_fallback(plan, encoded, [chunk])
        rereads.read(chunk, word_times.aligned(plan, encoded, [chunk], decoded)[0])


def _retried(
    plan: BatchSetup,
    encoded: EncodedRows | SpreadRows,
    group: list[Chunk],
    rows: list[int],
    first: list,
    previous: Sequence[list[int]] | None = None,
) -> dict[int, AlignedChunk]:
    """`rows`, whose first attempts (`first`) the fallback does not keep, through its next
    temperatures (per_row, its first round answered by those attempts)."""
    if not rows:
        return {}

    def attempt(pending: list[int], round_: int, temperature: float) -> list[AlignedChunk]:
        picked = [rows[i] for i in pending]
        if round_ == 0:
            return [first[row] for row in picked]
        weights = [group[row].seconds for row in picked]
        chosen = rows_decode.picked(previous, picked)
        return rows_decode.generate(plan, encoded.of(picked), weights, temperature, chosen)

    kept = per_row(plan.fallback, len(rows), attempt, [group[row].reread for row in rows])
    return dict(zip(rows, kept, strict=True))
