"""Decoding rules every backend shares: temperature fallback and file VAD settings.

The defaults are openai-whisper's and faster-whisper's, so a user moving from
either gets the same behaviour without flags. Each backend maps these to what
its engine has (faster-whisper's arguments, whisper-cli's flags, kvscribe's own
decoder for transformers) and says in its report what it could not honour.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
# Sampling (a fallback's temperatures above 0) is seeded, so the same file and options
# give the same text run after run.
SAMPLING_SEED = 14
# The most text tokens a second of speech holds, with room to spare: no one speaks ten
# words a second (kvscribe.timing.timed_words.is_squeezed), and a word is one to a few
# tokens in the languages measured.
MOST_TOKENS_PER_SECOND = 25
_TOKENS_ANY_CHUNK_MAY_HOLD = 16
# openai-whisper / faster-whisper: the previous text a window is prompted with is at most
# n_text_ctx // 2 - 1 tokens, and a window decoded above PROMPT_RESET_TEMPERATURE is not
# used as the next one's prompt (faster-whisper's prompt_reset_on_temperature).
PROMPT_MAX = 223
PROMPT_RESET_TEMPERATURE = 0.5


def tokens_heard(seconds: float) -> int:
    """The most text tokens `seconds` of audio can hold. A decode past it is repeating
    itself: a sampled fallback on a 1 s tail of French ran to the window's 224 tokens,
    about 2 s of decoding each time, where 41 are the most one second holds."""
    return _TOKENS_ANY_CHUNK_MAY_HOLD + math.ceil(MOST_TOKENS_PER_SECOND * seconds)


class Attempted(Protocol):
    """One decode of a window or chunk, as the fallback rule reads it."""

    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float


A = TypeVar("A", bound=Attempted)


@dataclass(frozen=True)
class Fallback:
    """When a window's decode is rejected and retried at the next temperature.

    A decode fails when its text compresses too well (repetition: ratio above
    `compression_ratio_threshold`) or its mean token log-probability is below
    `logprob_threshold`. A window whose no-speech probability is above
    `no_speech_threshold` while its log-probability is below `logprob_threshold`
    is silence: nothing is emitted for it. None turns a test off. Above
    temperature 0, `best_of` samples are drawn and the likeliest kept.
    """

    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    compression_ratio_threshold: float | None = 2.4
    logprob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    best_of: int = 5

    def needs_retry(self, compression_ratio: float, avg_logprob: float) -> bool:
        """The decode failed a quality test, so the next temperature should be tried."""
        too_repetitive = (
            self.compression_ratio_threshold is not None
            and compression_ratio > self.compression_ratio_threshold
        )
        too_unlikely = self.logprob_threshold is not None and avg_logprob < self.logprob_threshold
        return too_repetitive or too_unlikely

    def is_silence(self, no_speech_prob: float, avg_logprob: float) -> bool:
        """openai-whisper's rule: likely no speech, and what was decoded is unlikely."""
        if self.no_speech_threshold is None or no_speech_prob <= self.no_speech_threshold:
            return False
        return self.logprob_threshold is None or avg_logprob < self.logprob_threshold

    def is_final(self, attempt: Attempted) -> bool:
        """No retry: silence (checked first: a silent window is never retried) or a pass."""
        if self.is_silence(attempt.no_speech_prob, attempt.avg_logprob):
            return True
        return not self.needs_retry(attempt.compression_ratio, attempt.avg_logprob)

    def kept(self, attempts: Sequence[A]) -> A:
        """The attempt kept: the last one when it is final, else (every temperature failed)
        the likeliest of those under the compression threshold, or of all (faster-whisper)."""
        last = attempts[-1]
        if self.is_final(last):
            return last
        limit = self.compression_ratio_threshold
        readable = [a for a in attempts if limit is None or a.compression_ratio <= limit]
        return max(readable or attempts, key=lambda a: a.avg_logprob)

    def describe(self, repetition_test: str | None = None) -> str:
        """The rule in force, one line for every backend's stats report: "0.0-1.0 step 0.2,
        best of 5, compression > 2.4, logprob < -1.0, no speech > 0.6". An engine whose
        repetition test is not the compression ratio names its own (`repetition_test`)."""
        temperatures = self.temperatures or (0.0,)
        if len(temperatures) == 1:
            parts = [f"{_number(temperatures[0])} only (no retry)"]
        else:
            steps = {round(b - a, 6) for a, b in itertools.pairwise(temperatures)}
            spread = " ".join(map(_number, temperatures))
            if len(steps) == 1:
                spread = f"{_number(temperatures[0])}-{_number(temperatures[-1])}"
                spread += f" step {_number(steps.pop())}"
            parts = [spread, f"best of {self.best_of}"]
        tests = (
            ("compression >", self.compression_ratio_threshold),
            ("logprob <", self.logprob_threshold),
            ("no speech >", self.no_speech_threshold),
        )
        words = [f"{name} {_number(value)}" for name, value in tests if value is not None]
        if repetition_test and self.compression_ratio_threshold is not None:
            words[0] = repetition_test
        return ", ".join(parts + words)


def unspoken(fallback: Fallback, no_speech_prob: float, temperature: float, text: str) -> bool:
    """Text from a window the model itself judges silent, that openai-whisper's silence rule
    lets through: the beam search failed (repetition) and a sample was kept, or the text
    holds no word. Low noise does this (tiny.en, 20 s at amplitude 0.003: beam search says
    " . . . ." at no-speech 0.97, a sample at 0.4-0.6 then passes with " ." at logprob -0.6;
    3 runs in 9), so without this rule silence would read as text by chance."""
    if fallback.no_speech_threshold is None or no_speech_prob <= fallback.no_speech_threshold:
        return False
    return temperature > 0 or not any(ch.isalnum() for ch in text)


def per_row(
    fallback: Fallback,
    rows: int,
    decode: Callable[[list[int], int, float], Sequence[A]],
    once: Sequence[bool] = (),
) -> list[A]:
    """Temperature fallback per row of a batch (the batched paths of both engines): every
    row is decoded at the first temperature, then the rows whose attempt is not final
    again, together, at each next one; each row keeps Fallback.kept of its attempts.
    `decode(rows, round, temperature)` gives one attempt per row asked.

    A row marked in `once` (a stretch its chunk's decode left uncovered, read again) gets
    the first temperature's attempt only. The fallback is for a window whose beam search
    repeats itself or loses confidence; sampling a second or two of audio the chunk's own
    decode could not place read noise instead (a French telephone recording, base: two 1 s
    stretches sampled at five temperatures, about 3 s of decoding, for text no closer to
    the reference: WER 0.151 with those samples, 0.143 without)."""
    tried: list[list[A]] = [[] for _ in range(rows)]
    pending = list(range(rows))
    once = list(once) or [False] * rows
    for round_, temperature in enumerate(fallback.temperatures or (0.0,)):
        for row, attempt in zip(pending, decode(pending, round_, temperature), strict=True):
            tried[row].append(attempt)
        pending = [row for row in pending if not (once[row] or fallback.is_final(tried[row][-1]))]
        if not pending:
            break
    return [fallback.kept(attempts) for attempts in tried]


def _number(value: float) -> str:
    """0.0, 0.2, 2.4, -1.0 as openai-whisper's flags write them; 0.25 kept whole."""
    return f"{value:.1f}" if round(value, 1) == value else f"{value:g}"


def temperatures_from(start: float, increment: float | None) -> tuple[float, ...]:
    """openai-whisper's `--temperature T --temperature_increment_on_fallback I`:
    T, T+I, ... up to 1.0; no increment (or 0): T alone, no fallback."""
    if not increment:
        return (start,)
    steps = round((1.0 - start) / increment + 1e-9)
    return tuple(round(start + i * increment, 6) for i in range(steps + 1))


def compression_ratio(text: str) -> float:
    """Bytes of the text over bytes of its zlib compression (openai-whisper's measure of
    repetition: looping text compresses far better than speech)."""
    raw = text.encode("utf-8")
    if not raw:
        return 0.0
    return len(raw) / len(zlib.compress(raw))


@dataclass(frozen=True)
class VadFilter:
    """Drop the audio the silero VAD hears no speech in before decoding a file
    (faster-whisper's `vad_filter`); timestamps stay on the original clock.
    Defaults are faster-whisper's VadOptions."""

    threshold: float = 0.5
    min_speech_seconds: float = 0.0
    min_silence_seconds: float = 2.0
    pad_seconds: float = 0.4
