"""Greedy and beam search over one 30 s window, and sampling at a temperature (the
fallback's later attempts) over one or several, timing every decoder step.

The search runs against a small engine interface, `SearchSetup.decoder.logits(tokens,
cache, cross, positions)`: the transformers backend's PolicyDecoder (torch) or the ONNX
engine (numpy, `device` None). Greedy and beam search work on either through
kvscribe.arrays, and so does sampling, from the engine kind's own generator (the same
seed draws different samples in torch and numpy).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvscribe import arrays
from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.stepped.rules import TokenRules


class StepDecoder(Protocol):
    def logits(
        self,
        tokens: Any,
        cache: PolicyCache,
        cross: CrossAttentionStore,
        positions: tuple[int, ...] = (-1,),
    ) -> Any:
        """Run `tokens` [rows, q] after what `cache` has seen (their K/V go into it) ->
        logits [rows, len(positions), vocab]."""


@dataclass
class WindowResult:
    tokens: list[int]  # sampled tokens, end-of-text excluded
    sum_logprob: float
    no_speech_prob: float
    step_seconds: list[float] = field(default_factory=list)  # the first one includes the prompt

    @property
    def avg_logprob(self) -> float:
        return self.sum_logprob / (len(self.tokens) + 1)


@dataclass(frozen=True)
class SearchSetup:
    decoder: StepDecoder
    rules: TokenRules
    eot: int
    no_speech: int
    device: Any  # a torch.device; None for an engine that works in numpy arrays


def search(
    setup: SearchSetup,
    prompt: list[int],
    sot_index: int,
    cache: PolicyCache,
    cross: CrossAttentionStore,
    beams: int,
    max_new: int,
) -> WindowResult:
    """Decode one window after `prompt`; `sot_index` is where <|startoftranscript|> sits."""
    with arrays.inference(setup.device):
        clock = _Clock()
        # The prompt is the same for every beam: run it once, then give each beam a copy.
        prompt_batch = arrays.tokens([prompt], setup.device)
        logits = setup.decoder.logits(prompt_batch, cache, cross, positions=(sot_index, -1))
        no_speech = no_speech_probs(logits[:, 0], setup.no_speech)[0]
        first = arrays.first_row_repeated(logits[:, -1], beams)
        if beams > 1:
            select_rows(cache, arrays.index([0] * beams, setup.device))
        run = _greedy if beams == 1 else _beam
        tokens, score = run(setup, first, cache, cross, beams, max_new, clock)
        return WindowResult(tokens, score, no_speech, clock.steps)


def _greedy(setup, logits, cache, cross, beams, max_new, clock):
    sampled: list[int] = []
    total = 0.0
    for _ in range(max_new):
        logprobs = setup.rules.logprobs(arrays.float32(logits), [sampled])[0]
        token = int(logprobs.argmax())
        total += float(logprobs[token])
        clock.tick()
        if token == setup.eot:
            break
        sampled.append(token)
        step = arrays.tokens([[token]], setup.device)
        logits = setup.decoder.logits(step, cache, cross)[:, -1]
    return sampled, total


def _beam(setup, logits, cache, cross, beams, max_new, clock):
    sequences: list[list[int]] = [[] for _ in range(beams)]
    scores = [0.0] * beams
    finished: dict[tuple[int, ...], float] = {}
    for _ in range(max_new):
        logprobs = setup.rules.logprobs(arrays.float32(logits), sequences)
        kept = expand(logprobs, sequences, scores, finished, beams, setup.eot)
        clock.tick()
        if len(finished) >= beams or not kept:
            break
        sequences = [list(seq) for seq, _, _ in kept]
        scores = [score for _, score, _ in kept]
        select_rows(cache, arrays.index([source for _, _, source in kept], setup.device))
        step = arrays.tokens([[seq[-1]] for seq in sequences], setup.device)
        logits = setup.decoder.logits(step, cache, cross)[:, -1]
    if not finished:
        finished = {tuple(seq): score for seq, score in zip(sequences, scores, strict=True)}
    best = max(finished.items(), key=lambda item: item[1] / max(1, len(item[0])))
    return list(best[0]), best[1]


def expand(logprobs, sequences, scores, finished, beams, eot):
    """Best continuations of every beam; finished ones go to `finished`, `beams` others are kept."""
    top_logprobs, top_tokens = arrays.topk(logprobs, beams + 1)
    candidates: dict[tuple[int, ...], tuple[float, int]] = {}
    for row in range(len(sequences)):
        for logprob, token in zip(
            top_logprobs[row].tolist(), top_tokens[row].tolist(), strict=True
        ):
            sequence = (*sequences[row], token)
            score = scores[row] + logprob
            if sequence not in candidates or candidates[sequence][0] < score:
                candidates[sequence] = (score, row)
    kept = []
    for sequence, (score, row) in sorted(candidates.items(), key=lambda item: -item[1][0]):
        if sequence[-1] == eot:  # only endings that rank above the last kept beam count
            if len(finished) < beams:
                finished[sequence[:-1]] = score
            continue
        kept.append((sequence, score, row))
        if len(kept) == beams:
            break
    return kept


@dataclass
class _Draws:
    """One chunk's `best_of` candidates drawn at a temperature: openai-whisper's sampling
    (softmax of the rule-masked logits / T) and its pick (sum logprob / length)."""

    sequences: list[list[int]]
    sums: list[float]
    done: list[bool]
    steps: int = 0  # draws made: the decoder steps this chunk took part in

    @classmethod
    def empty(cls, best_of: int) -> _Draws:
        return cls([[] for _ in range(best_of)], [0.0] * best_of, [False] * best_of)

    @property
    def ended(self) -> bool:
        return all(self.done)

    def draw(self, logprobs, temperature: float, generator, eot: int) -> None:
        """Sample the next token of every unfinished candidate from `logprobs` [best_of, vocab]
        (renormalised log-probabilities: the same distribution as the masked logits)."""
        self.steps += 1
        live = [row for row, done in enumerate(self.done) if not done]
        probabilities = arrays.softmax(logprobs[live] / temperature)
        tokens = arrays.draw(probabilities, generator)
        picked = arrays.at_columns(logprobs[live], tokens)
        for row, token, logprob in zip(live, tokens.tolist(), picked.tolist(), strict=True):
            self.sums[row] += logprob  # the untempered log-probability, as openai-whisper sums
            if token == eot:
                self.done[row] = True
            else:
                self.sequences[row].append(token)

    def best(self, no_speech_prob: float, step_seconds: list[float]) -> WindowResult:
        row = max(
            range(len(self.sequences)),
            key=lambda r: self.sums[r] / max(1, len(self.sequences[r])),
        )
        steps = step_seconds[: self.steps]
        return WindowResult(list(self.sequences[row]), self.sums[row], no_speech_prob, steps)


def sample(
    setup: SearchSetup,
    prompt: list[int],
    sot_index: int,
    cache: PolicyCache,
    cross: CrossAttentionStore,
    temperature: float,
    generators: list,
    max_new: int,
    on_step: Callable[[int], None] | None = None,
) -> list[WindowResult]:
    """Draw candidates at `temperature` for each of `len(generators)` chunks after the same
    `prompt`, keeping each chunk's likeliest (by mean logprob); each result's step times
    are those of the steps its chunk took part in (the longest: every step of the batch).

    `cross` holds the chunks' encoder outputs filled with `beams` = candidates per chunk
    (rows chunk-major). A chunk leaves the batch when all its candidates have ended; a
    finished candidate of a chunk still decoding is fed end-of-text and ignored.
    `on_step(rows)`: called with the rows alive at each step. The generators are
    kvscribe.stepped.fallback's (torch's, or numpy's for a numpy engine)."""
    with arrays.inference(setup.device):
        return _sample(
            setup, prompt, sot_index, cache, cross, temperature, generators, max_new, on_step
        )


def _sample(setup, prompt, sot_index, cache, cross, temperature, generators, max_new, on_step):
    clock = _Clock()
    chunks, best_of = len(generators), cross.beams
    logits = setup.decoder.logits(
        arrays.tokens([prompt] * chunks, setup.device), cache, cross, positions=(sot_index, -1)
    )
    no_speech = no_speech_probs(logits[:, 0], setup.no_speech)
    fan_out = [chunk for chunk in range(chunks) for _ in range(best_of)]
    select_rows(cache, arrays.index(fan_out, setup.device))
    logits = arrays.repeat_rows(logits[:, -1], best_of)
    draws = [_Draws.empty(best_of) for _ in range(chunks)]
    in_batch = list(range(chunks))
    for _ in range(max_new):
        if on_step is not None:
            on_step(len(in_batch) * best_of)
        rows = [seq for chunk in in_batch for seq in draws[chunk].sequences]
        logprobs = setup.rules.logprobs(arrays.float32(logits), rows)
        for position, chunk in enumerate(in_batch):
            block = logprobs[position * best_of : (position + 1) * best_of]
            draws[chunk].draw(block, temperature, generators[chunk], setup.eot)
        clock.tick()
        still = [chunk for chunk in in_batch if not draws[chunk].ended]
        if not still:
            break
        if len(still) < len(in_batch):
            kept = [in_batch.index(chunk) for chunk in still]
            cross.select_chunks(kept)
            rows_kept = [p * best_of + r for p in kept for r in range(best_of)]
            select_rows(cache, arrays.index(rows_kept, setup.device))
            in_batch = still
        last = [
            [setup.eot if done else seq[-1]]
            for chunk in in_batch
            for seq, done in zip(draws[chunk].sequences, draws[chunk].done, strict=True)
        ]
        logits = setup.decoder.logits(arrays.tokens(last, setup.device), cache, cross)[:, -1]
    return [draws[c].best(no_speech[c], clock.steps) for c in range(chunks)]


def select_rows(cache: PolicyCache, rows) -> None:
    """Make the cache's rows `rows` (an index array: kvscribe.arrays.index, made once per
    step for every layer's stores) of what it holds (beams kept, candidates fanned out)."""
    for layer in cache.policy_layers:
        layer.reorder_cache(rows)


def no_speech_probs(logits, no_speech: int) -> list[float]:
    """P(<|nospeech|>) at the <|startoftranscript|> position, per row of `logits` [rows, vocab]."""
    if no_speech < 0:
        return [0.0] * logits.shape[0]
    return arrays.softmax(arrays.float32(logits))[:, no_speech].tolist()


class _Clock:
    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.steps: list[float] = []

    def tick(self) -> None:
        now = time.perf_counter()
        self.steps.append(now - self.last)
        self.last = now
