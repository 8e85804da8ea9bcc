"""Batched decoding: several speech chunks x beams as the rows of one decoder batch, for
every engine kvscribe steps itself (the transformers backend's torch decoder, the onnx
backend's ONNX Runtime graphs: kvscribe.arrays picks the array kind).

Every chunk decodes from the same prompt (no previous text: the chunks are decoded
side by side) without timestamp tokens, with the window's cache policy applied to every
row; its words are timed by DTW alignment and cut into segments as the ctranslate2
backend's are (kvscribe.aligned_chunks). Temperature
fallback works per chunk: the chunks whose decode failed the rule are decoded again
together at the next temperature (`best_of` sampled rows each). The
cross-attention store keeps one copy per chunk when its policy is shared (beams
fold into the query axis) and one per beam otherwise. A chunk whose search ends
leaves the batch at once: its rows are dropped from the self-attention cache and
its cross-attention copy from the store, so it stops costing compute. (A cross store
with copies of its own moves the kept ones to its front: held until the batch ends.)

What the engine's `plan.encode` returns for a batch of chunks is only counted with
`len()`, sliced (`encoded[i:i + 1]`), indexed with a list of chunks, and handed to
`plan.fill_cross` and the aligner: a torch tensor [chunks, frames, d] or the onnx
engine's kvscribe.backends.onnx.engine.EncodedChunks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvscribe import arrays
from kvscribe.aligned_chunks import AlignedChunk, on_original_clock
from kvscribe.audio.mel import FRAMES_PER_SECOND, FRAMES_PER_WINDOW, HOP
from kvscribe.chunking import Chunk, ChunkResult
from kvscribe.decoding import per_row
from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.stepped import fallback
from kvscribe.stepped.longform import WindowPlan, WindowStats, encode_timed
from kvscribe.stepped.search import expand, no_speech_probs, sample, select_rows


@dataclass
class _Search:
    """One chunk's beam search: its live hypotheses and the endings found so far."""

    sequences: list[list[int]]
    scores: list[float]
    no_speech_prob: float
    finished: dict[tuple[int, ...], float] = field(default_factory=dict)
    ended: bool = False  # no more steps: enough endings, or nothing left to keep

    def result(self) -> ChunkResult:
        endings = self.finished or {
            tuple(seq): score for seq, score in zip(self.sequences, self.scores, strict=True)
        }
        tokens, score = max(endings.items(), key=lambda item: item[1] / max(1, len(item[0])))
        return ChunkResult(list(tokens), score / (len(tokens) + 1), self.no_speech_prob)


def decode_with_fallback(
    plan: WindowPlan,
    chunks: list[Chunk],
    mels: list,
    prompt: list[int],
    stats: WindowStats,
    decode_text: Callable[[list[int]], str],
) -> list[AlignedChunk]:
    """Decode `chunks` (their 30 s log-mels `mels`) together under the plan's fallback rule
    (kvscribe.decoding.per_row: each temperature in turn for the chunks still failing),
    then each chunk's kept attempt with its words aligned from the encoder output already
    computed."""
    with arrays.inference(plan.setup.device):
        return _decode_with_fallback(plan, chunks, mels, prompt, stats, decode_text)


def _decode_with_fallback(plan, chunks, mels, prompt, stats, decode_text) -> list[AlignedChunk]:
    encoded = encode_timed(plan, arrays.stack(mels), stats)
    stats.windows += len(chunks)
    frames = [chunk.start // HOP for chunk in chunks]
    aligned: list[CrossAttentionStore | None] = [None] * len(chunks)

    def attempt(pending: list[int], round_: int, temperature: float) -> list[fallback.Attempt]:
        stats.fallback_attempts += len(pending) if round_ else 0
        generators = [fallback.generator(plan.setup.device, frames[c], round_) for c in pending]
        selected = encoded[pending] if len(pending) < len(chunks) else encoded
        cross = None
        if round_ == 0 and not plan.cross_spec.quant:
            # Round 0 decodes every chunk: alignment reads the K/V it projects (a quantized
            # store does not keep them, so the aligner then projects its own).
            cross = _filled(plan, encoded, _copies(plan, temperature), stats)
            aligned[:] = [cross.one_chunk(index) for index in range(len(chunks))]
        elif round_ > 0:  # the K/V kept for alignment are held while this round decodes
            cross = _filled(plan, selected, _copies(plan, temperature), stats, aligned)
        results = _decode_at(plan, selected, prompt, stats, temperature, generators, cross)
        return [
            fallback.attempt_of(
                r.tokens,
                r.avg_logprob,
                r.no_speech_prob,
                temperature,
                decode_text([t for t in r.tokens if t < plan.special.eot]),
            )
            for r in results
        ]

    kept = per_row(plan.fallback, len(chunks), attempt, [chunk.reread for chunk in chunks])
    limit = plan.max_new(len(prompt))
    return [
        _chunk_decode(plan, chunk, encoded[i : i + 1], kept[i], decode_text, aligned[i], limit)
        for i, chunk in enumerate(chunks)
    ]


def _copies(plan: WindowPlan, temperature: float) -> int:
    """Rows per chunk in a search at `temperature`: its beams, or best_of samples."""
    return plan.beams if temperature == 0 else plan.fallback.best_of


def _filled(
    plan: WindowPlan,
    encoded,
    copies: int,
    stats: WindowStats,
    alive: Sequence[CrossAttentionStore | None] = (),
) -> CrossAttentionStore:
    """The cross-attention store of `encoded` (`copies` per chunk unless shared); the
    stats count its bytes with those of the `alive` stores held beside it."""
    cross = CrossAttentionStore(plan.cross_spec, copies)
    plan.fill_cross(cross, encoded)
    stores = [cross, *(store for store in alive if store is not None)]
    held = arrays.held_bytes(tensor for store in stores for tensor in store.tensors())
    stats.cross_bytes = max(stats.cross_bytes, held)
    return cross


def _decode_at(
    plan: WindowPlan,
    encoded,
    prompt: list[int],
    stats: WindowStats,
    temperature: float,
    generators: list,
    cross: CrossAttentionStore | None = None,
) -> list:
    """One attempt for every chunk of `encoded`: beam search at temperature 0, else
    sampling (results with tokens, avg_logprob and no_speech_prob either way). `cross`:
    the store already filled for these chunks and this search, if there is one."""
    if temperature == 0:
        return _beam_batch(plan, encoded, prompt, stats, cross=cross)
    if cross is None:
        cross = _filled(plan, encoded, _copies(plan, temperature), stats)
    cache = PolicyCache(plan.self_specs)
    sot_index = plan.sot_index(prompt)
    max_new = plan.max_new(len(prompt))

    def note(rows: int) -> None:
        _note_step(stats, plan, cache, rows)

    results = sample(
        plan.setup, prompt, sot_index, cache, cross, temperature, generators, max_new, note
    )
    stats.step_seconds.extend(max((r.step_seconds for r in results), key=len))
    stats.tokens += sum(len(r.step_seconds) for r in results)
    stats.self_peak_bytes = max(stats.self_peak_bytes, cache.peak_bytes)
    stats.recompute_macs += cache.recompute_macs
    return results


def _chunk_decode(
    plan: WindowPlan,
    chunk: Chunk,
    encoded,
    kept: fallback.Attempt,
    decode_text: Callable[[list[int]], str],
    cross: CrossAttentionStore | None,
    limit: int,
) -> AlignedChunk:
    """The kept attempt as chunking and the segments need it: silence has no tokens; speech
    has its words timed from the chunk's encoder output (no aligner in this install: none,
    and the chunk's text spans the chunk)."""
    silent = plan.fallback.is_silence(kept.no_speech_prob, kept.avg_logprob)
    tokens = [] if silent else [t for t in kept.tokens if t < plan.special.eot]
    words = []
    if tokens and plan.align_words is not None and decode_text(tokens).strip():
        words = plan.align_words.chunk_words(  # kvscribe.stepped.alignment.WordAligner
            encoded,
            tokens,
            min(round(chunk.seconds * FRAMES_PER_SECOND), FRAMES_PER_WINDOW),
            sot_sequence=plan.sot_sequence,
            cross=cross,
        )
    return AlignedChunk(
        tokens,
        kept.avg_logprob,
        kept.no_speech_prob,
        temperature=kept.temperature,
        compression_ratio=kept.compression_ratio,
        words=on_original_clock(words, chunk),
        cut_short=len(tokens) >= limit,
    )


def decode_batch(
    plan: WindowPlan,
    mels: list,
    prompt: list[int],
    stats: WindowStats,
    compact: bool = True,
) -> list[ChunkResult]:
    """Decode the chunks whose 30 s log-mels are `mels` ([n_mels, 3000] each) together, at
    temperature 0 only (no fallback).

    `compact`: a chunk whose search ends leaves the batch (kvscribe's way). False keeps its
    rows in the batch, fed end-of-text and ignored, as a masked batch would: only
    benchmarks/batched_compaction.py asks for that, to measure the difference."""
    with arrays.inference(plan.setup.device):
        encoded = encode_timed(plan, arrays.stack(mels), stats)
        stats.windows += len(mels)
        return _beam_batch(plan, encoded, prompt, stats, compact)


def _beam_batch(
    plan: WindowPlan,
    encoded,
    prompt: list[int],
    stats: WindowStats,
    compact: bool = True,
    cross: CrossAttentionStore | None = None,
) -> list[ChunkResult]:
    """Beam search (greedy at beam 1) for every chunk of `encoded` [chunks, frames, d];
    `cross`, if given, is its store already filled (`plan.beams` copies unless shared)."""
    setup = plan.setup
    if cross is None:
        cross = _filled(plan, encoded, plan.beams, stats)
    cache = PolicyCache(plan.self_specs)
    chunks = len(encoded)
    sot_index = plan.sot_index(prompt)
    max_new = plan.max_new(len(prompt))

    step_started = time.perf_counter()
    tokens = arrays.tokens([prompt] * chunks, setup.device)
    logits = setup.decoder.logits(tokens, cache, cross, positions=(sot_index, -1))
    no_speech = no_speech_probs(logits[:, 0], setup.no_speech)
    searches = [_Search([[] for _ in range(plan.beams)], [0.0] * plan.beams, p) for p in no_speech]
    fan_out = [chunk for chunk in range(chunks) for _ in range(plan.beams)]
    select_rows(cache, arrays.index(fan_out, setup.device))
    logits = arrays.repeat_rows(logits[:, -1], plan.beams)

    in_batch = list(range(chunks))  # chunk numbers with rows in the batch, in row order
    for _ in range(max_new):
        stats.step_seconds.append(time.perf_counter() - step_started)
        step_started = time.perf_counter()
        _note_step(stats, plan, cache, len(in_batch) * plan.beams)
        rows = [seq for chunk in in_batch for seq in searches[chunk].sequences]
        logprobs = setup.rules.logprobs(arrays.float32(logits), rows)
        sources = _advance(searches, in_batch, logprobs, plan.beams, setup.eot)
        still = [chunk for chunk in in_batch if not searches[chunk].ended]
        if not still:
            break
        if compact and len(still) < len(in_batch):
            kept = [in_batch.index(chunk) for chunk in still]
            cross.select_chunks(kept)
            sources = [sources[position] for position in kept]
            in_batch = still
        rows_kept = [row for block in sources for row in block]
        select_rows(cache, arrays.index(rows_kept, setup.device))
        last = [
            [setup.eot if searches[chunk].ended else seq[-1]]
            for chunk in in_batch
            for seq in searches[chunk].sequences
        ]
        logits = setup.decoder.logits(arrays.tokens(last, setup.device), cache, cross)[:, -1]
    stats.self_peak_bytes = max(stats.self_peak_bytes, cache.peak_bytes)
    stats.recompute_macs += cache.recompute_macs
    results = [search.result() for search in searches]
    stats.tokens += sum(len(r.tokens) + 1 for r in results)
    return results


def _advance(searches, in_batch, logprobs, beams, eot) -> list[list[int]]:
    """One beam-search step for every chunk in the batch: per chunk, the rows (indices into
    this step's rows) its kept hypotheses continue; a chunk that has ended keeps its own."""
    sources: list[list[int]] = []
    for position, chunk in enumerate(in_batch):
        search = searches[chunk]
        first_row = position * beams
        own = list(range(first_row, first_row + beams))
        if search.ended:
            sources.append(own)
            continue
        kept = expand(
            logprobs[first_row : first_row + beams],
            search.sequences,
            search.scores,
            search.finished,
            beams,
            eot,
        )
        if len(search.finished) >= beams or not kept:
            search.ended = True
            sources.append(own)
            continue
        search.sequences = [list(seq) for seq, _, _ in kept]
        search.scores = [score for _, score, _ in kept]
        sources.append([first_row + row for _, _, row in kept])
    return sources


def _note_step(stats: WindowStats, plan: WindowPlan, cache: PolicyCache, rows: int) -> None:
    """The full cache's size for the rows alive now, to compare the policy's peak with."""
    full = cache.get_seq_length() * rows * plan.kv_bytes_per_position
    stats.self_full_bytes = max(stats.self_full_bytes, full)


def full_prompt(plan: WindowPlan, prompt: list[int]) -> list[int]:
    """The decoder prompt of every chunk: the hotwords and the user's prompt text (if
    any), then the sot sequence; no previous text, since the chunks decode side by side."""
    return plan.prompt_for(prompt)


def bytes_per_chunk(plan: WindowPlan, silent_chunk) -> int:
    """KV storage one chunk holds at its largest under the plan's policies: its cross-
    attention copy (or one per beam) plus the self-attention cache of its beams after a
    full window's positions, measured from the storage a probe cache actually holds.
    `silent_chunk`: an encoder output of one chunk as the engine gives it (zeros will do:
    only sizes matter)."""
    setup = plan.setup
    with arrays.inference(setup.device):
        cross = CrossAttentionStore(plan.cross_spec, plan.beams)
        plan.fill_cross(cross, silent_chunk)
        cache = PolicyCache(plan.self_specs)
        eot_rows = [[plan.special.eot] * plan.text_ctx] * plan.beams
        setup.decoder.logits(arrays.tokens(eot_rows, setup.device), cache, cross)
        return cross.held_bytes + cache.peak_bytes


def budgeted_batch(
    plan: WindowPlan,
    wanted: int,
    budget_mb: int | None,
    silent_chunk: Callable[[], Any],
    measured: dict,
) -> tuple[int, str]:
    """The batch up to `wanted` whose chunks' KV storage fits a profile's `kv_budget_mb`,
    and how it was chosen (for the stats' batch size row). A chunk's bytes are measured
    once per (beams, policies) by bytes_per_chunk on `silent_chunk()` and kept in
    `measured`."""
    if budget_mb is None:
        return wanted, ""
    per_chunk = measured_chunk_bytes(plan, silent_chunk, measured)
    batch = fit_batch(wanted, budget_mb * 1_000_000, per_chunk)
    return batch, f" (KV budget {budget_mb} MB / {per_chunk / 1e6:.1f} MB per chunk, measured)"


def measured_chunk_bytes(plan: WindowPlan, silent_chunk: Callable[[], Any], measured: dict) -> int:
    """bytes_per_chunk for the plan's beams and policies, probed once and kept in
    `measured`."""
    key = (plan.beams, plan.self_specs, plan.cross_spec)
    if key not in measured:
        measured[key] = bytes_per_chunk(plan, silent_chunk())
    return measured[key]


def fit_batch(wanted: int, budget_bytes: int | None, per_chunk: int) -> int:
    """The largest batch up to `wanted` whose chunks' KV storage fits `budget_bytes`
    (at least 1: one chunk at a time is the sequential path's memory, which must run)."""
    if budget_bytes is None:
        return wanted
    return max(1, min(wanted, budget_bytes // max(1, per_chunk)))
