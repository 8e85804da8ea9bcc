"""Temperature fallback for kvscribe's own decoder: which attempt of a window is kept.

The rule is faster-whisper's generate_with_fallback (openai-whisper's, plus its pick when
every temperature fails): decode at each temperature in turn until a decode passes the
quality tests (kvscribe.decoding.Fallback.needs_retry) or is silence; when all fail, keep
the likeliest decode among those that are not repetitive. The sequential and the batched
paths both decide with `decided`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvscribe.decoding import SAMPLING_SEED, Fallback, compression_ratio

# openai-whisper / faster-whisper: a window decoded above this temperature is not used as
# the next window's prompt (faster-whisper's prompt_reset_on_temperature).
PROMPT_RESET_TEMPERATURE = 0.5


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


def is_final(attempt: Attempt, fallback: Fallback) -> bool:
    """No retry: silence (checked first: a silent window is never retried) or a pass."""
    if fallback.is_silence(attempt.no_speech_prob, attempt.avg_logprob):
        return True
    return not fallback.needs_retry(attempt.compression_ratio, attempt.avg_logprob)


def decided(attempts: Sequence[Attempt], fallback: Fallback) -> Attempt:
    """The attempt kept: the last one when it is final, else (every temperature failed) the
    likeliest of those under the compression threshold, or of all (faster-whisper)."""
    last = attempts[-1]
    if is_final(last, fallback):
        return last
    threshold = fallback.compression_ratio_threshold
    readable = [a for a in attempts if threshold is None or a.compression_ratio <= threshold]
    return max(readable or attempts, key=lambda a: a.avg_logprob)


def temperatures(fallback: Fallback) -> tuple[float, ...]:
    return fallback.temperatures or (0.0,)


def resets_prompt(attempts: Sequence[Attempt]) -> bool:
    """The next window starts without previous text: the last temperature tried was high
    (faster-whisper passes the last one tried on, even when an earlier decode is kept)."""
    return attempts[-1].temperature > PROMPT_RESET_TEMPERATURE


def generator(device: torch.device, window_frame: int, attempt: int) -> torch.Generator:
    """A generator seeded by where the window starts and which attempt this is: the same
    input samples the same candidates whatever else is in the batch."""
    seeded = torch.Generator(device=device)
    seeded.manual_seed(SAMPLING_SEED + 1_000_003 * attempt + window_frame)
    return seeded
