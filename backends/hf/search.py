"""Greedy and beam search over one 30 s window, timing every decoder step."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache

from .decoder import PolicyDecoder
from .rules import TokenRules


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
    decoder: PolicyDecoder
    rules: TokenRules
    eot: int
    no_speech: int
    device: torch.device


@torch.inference_mode()
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
    clock = _Clock()
    # The prompt is the same for every beam: run it once, then give each beam a copy.
    prompt_batch = torch.tensor([prompt], device=setup.device)
    logits = setup.decoder.logits(prompt_batch, cache, cross, positions=(sot_index, -1))
    no_speech = 0.0
    if setup.no_speech >= 0:
        no_speech = float(torch.softmax(logits[0, 0].float(), dim=-1)[setup.no_speech])
    first = logits[:, -1].repeat(beams, 1)
    if beams > 1:
        fan_out = torch.zeros(beams, dtype=torch.long, device=setup.device)
        for layer in cache.policy_layers:
            layer.reorder_cache(fan_out)
    run = _greedy if beams == 1 else _beam
    tokens, score = run(setup, first, cache, cross, beams, max_new, clock)
    return WindowResult(tokens, score, no_speech, clock.steps)


def _greedy(setup, logits, cache, cross, beams, max_new, clock):
    sampled: list[int] = []
    total = 0.0
    for _ in range(max_new):
        logprobs = setup.rules.logprobs(logits.float(), [sampled])[0]
        token = int(logprobs.argmax())
        total += float(logprobs[token])
        clock.tick()
        if token == setup.eot:
            break
        sampled.append(token)
        step = torch.tensor([[token]], device=setup.device)
        logits = setup.decoder.logits(step, cache, cross)[:, -1]
    return sampled, total


def _beam(setup, logits, cache, cross, beams, max_new, clock):
    sequences: list[list[int]] = [[] for _ in range(beams)]
    scores = [0.0] * beams
    finished: dict[tuple[int, ...], float] = {}
    for _ in range(max_new):
        logprobs = setup.rules.logprobs(logits.float(), sequences)
        kept = expand(logprobs, sequences, scores, finished, beams, setup.eot)
        clock.tick()
        if len(finished) >= beams or not kept:
            break
        sequences = [list(seq) for seq, _, _ in kept]
        scores = [score for _, score, _ in kept]
        sources = torch.tensor([source for _, _, source in kept], device=setup.device)
        for layer in cache.policy_layers:
            layer.reorder_cache(sources)
        step = torch.tensor([[seq[-1]] for seq in sequences], device=setup.device)
        logits = setup.decoder.logits(step, cache, cross)[:, -1]
    if not finished:
        finished = {tuple(seq): score for seq, score in zip(sequences, scores, strict=True)}
    best = max(finished.items(), key=lambda item: item[1] / max(1, len(item[0])))
    return list(best[0]), best[1]


def expand(logprobs, sequences, scores, finished, beams, eot):
    """Best continuations of every beam; finished ones go to `finished`, `beams` others are kept."""
    top_logprobs, top_tokens = logprobs.topk(beams + 1, dim=-1)
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


class _Clock:
    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.steps: list[float] = []

    def tick(self) -> None:
        now = time.perf_counter()
        self.steps.append(now - self.last)
        self.last = now
