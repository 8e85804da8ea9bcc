"""Temperature fallback for kvscribe's own decoder: which attempt of a window is kept.

The rule is faster-whisper's generate_with_fallback (openai-whisper's, plus its pick when
every temperature fails): decode at each temperature in turn until a decode passes the
quality tests (kvscribe.decoding.Fallback.needs_retry) or is silence; when all fail, keep
the likeliest decode among those that are not repetitive. The rule itself is
kvscribe.decoding's (Fallback.is_final, Fallback.kept; per row of a batch: per_row), the
same for every engine kvscribe steps or batches; here are the attempts and their seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvscribe.decoding import PROMPT_RESET_TEMPERATURE, SAMPLING_SEED, Fallback, compression_ratio


@dataclass(frozen=True)
class Attempt:
    """One decode of a window at one temperature and the scores the rule reads."""

    tokens: list[int]  # sampled tokens, timestamps included, end-of-text excluded
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float


def attempt_of(
    tokens: list[int],
    avg_logprob: float,
    no_speech_prob: float,
    temperature: float,
    text: str,
) -> Attempt:
    """An attempt, its compression ratio measured on its text as faster-whisper does
    (text tokens only, stripped)."""
    ratio = compression_ratio(text.strip())
    return Attempt(tokens, avg_logprob, no_speech_prob, temperature, ratio)


def temperatures(fallback: Fallback) -> tuple[float, ...]:
    return fallback.temperatures or (0.0,)


def resets_prompt(attempts: Sequence[Attempt]) -> bool:
    """The next window starts without previous text: the last temperature tried was high
    (faster-whisper passes the last one tried on, even when an earlier decode is kept)."""
    return attempts[-1].temperature > PROMPT_RESET_TEMPERATURE


def generator(device, window_frame: int, attempt: int):
    """A generator seeded by where the window starts and which attempt this is: the same
    input samples the same candidates whatever else is in the batch. torch's on a torch
    device, numpy's when `device` is None (an engine in numpy arrays): the two draw
    different samples from the same seed."""
    seed = SAMPLING_SEED + 1_000_003 * attempt + window_frame
    if device is None:
        import numpy as np

        return np.random.default_rng(seed)
    import torch

    seeded = torch.Generator(device=device)
    seeded.manual_seed(seed)
    return seeded
