"""A batch's `generate` calls on CTranslate2: one attempt per row, shared out over the
single-thread replicas where the search draws no samples, each row prompted with its
previous text where the chunks are dealt in lanes (kvscribe/chunk_rounds.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvscribe.adapters import faster_whisper as adapter
from kvscribe.aligned_chunks import AlignedChunk
from kvscribe.backends.ctranslate2.replicas import rows_of
from kvscribe.decoding import compression_ratio, tokens_heard

if TYPE_CHECKING:
    from kvscribe.backends.ctranslate2.batched import BatchSetup


def generate(
    plan: BatchSetup,
    encoded,
    weights: list[float],
    temperature: float,
    previous: Sequence[list[int]] | None = None,
) -> list[AlignedChunk]:
    """One attempt for each row (`weights`: each row's seconds of audio), shared out over
    the replicas where there are any and the search draws no samples."""
    rows = len(weights)
    heard = tokens_heard(max(weights))
    sampled = temperature > 0  # on one generator, see replicas
    if sampled or not plan.replicas.split(rows):
        model = plan.replicas.decoder(rows, sampled).model
        return attempts(plan, model, encoded, heard, temperature, previous)
    replicas = plan.replicas
    return replicas.over_rows(
        lambda share: attempts(
            plan,
            replicas.engine.model,
            rows_of(encoded, share),
            heard,
            temperature,
            picked(previous, share),
        ),
        rows,
        weights,
    )


def picked(previous: Sequence[list[int]] | None, rows: list[int]) -> list[list[int]] | None:
    return None if previous is None else [previous[row] for row in rows]


def row_prompts(
    plan: BatchSetup, previous: Sequence[list[int]] | None, rows: int
) -> list[list[int]]:
    """Each row's prompt: its previous text (kvscribe.chunk_rounds.text_before) with the
    hotwords and sot sequence, as faster-whisper's transcribe() builds a window's. One
    `generate` call takes prompts of one length only, so every row keeps as many of its
    last previous tokens as the row with fewest has; where one has none, every row gets
    the plan's prompt (the request's)."""
    keep = min((len(tokens) for tokens in previous), default=0) if previous else 0
    if keep == 0:
        return [list(plan.prompt) for _ in range(rows)]
    return [
        adapter.prompt(plan.engine, plan.tokenizer, tokens[-keep:], plan.hotwords)
        for tokens in previous
    ]


def attempts(
    plan: BatchSetup,
    model,
    encoded,
    heard: int,
    temperature: float,
    previous: Sequence[list[int]] | None = None,
) -> list[AlignedChunk]:
    """One `generate` call on `model` (a CTranslate2 Whisper model): an attempt per row of
    `encoded` (`previous`: each row's previous text, row_prompts), beam search at temperature
    0, else `best_of` samples, each at most `heard` tokens (tokens_heard of the longest
    row's audio: the rows a fallback decodes again are mostly short tails, and a repeating
    sample of one ran to the window's limit) and the window's limit."""
    if temperature > 0:
        search = {
            "beam_size": 1,
            "num_hypotheses": plan.fallback.best_of,
            "sampling_topk": 0,
            "sampling_temperature": temperature,
        }
    else:
        search = {"beam_size": plan.beams}
    prompts = row_prompts(plan, previous, encoded.shape[0])
    if plan.max_new_tokens is not None:
        heard = min(heard, plan.max_new_tokens)
    max_length = min(plan.text_limit, len(prompts[0]) + heard)
    options = {
        "max_length": max_length,
        "suppress_blank": True,
        "suppress_tokens": plan.suppress,
        "return_scores": True,
        "return_no_speech_prob": True,
        **plan.generate_options,
        **search,
    }
    results = model.generate(encoded, prompts, **options)
    new_tokens = max_length - len(prompts[0])
    return [_decoded(plan, result, temperature, new_tokens, len(prompts[0])) for result in results]


def _decoded(
    plan: BatchSetup, result, temperature: float, new_tokens: int, prompt_length: int
) -> AlignedChunk:
    tokens = list(result.sequences_ids[0])
    total_logprob = result.scores[0] * len(tokens)  # scores are length-normalised
    text = plan.tokenizer.decode(tokens).strip()
    return AlignedChunk(
        tokens,
        total_logprob / (len(tokens) + 1),
        result.no_speech_prob,
        temperature=temperature,
        compression_ratio=compression_ratio(text),
        cut_short=len(tokens) >= new_tokens,
        prompt_length=prompt_length,
    )
