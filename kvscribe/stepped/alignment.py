"""Word timestamps from the alignment heads' cross-attention + DTW, for any engine (numpy).

openai-whisper's method (whisper/timing.py): one teacher-forced decoder pass over
[sot sequence, <|notimestamps|>, the window's text tokens, <|endoftext|>] gives the
cross-attention of the heads known to follow the audio; their weights, normalised
and smoothed, form a token x frame cost matrix; dynamic time warping through it
gives each token the frame where it begins. Words are grouped and trimmed by
kvscribe.timing.words, as every backend's are.

The engine enters through one callable, `attend` (see Attend): the teacher-forced pass,
returning numpy logits and the alignment heads' scores. Everything after it is here, in
numpy, so the transformers backend (backends/transformers/alignment.py) and the onnx backend
(backends/onnx/alignment.py) time words with the same code. No torch import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kvscribe.kvcache.cache import CrossAttentionStore
from kvscribe.models.vocab import SpecialTokens
from kvscribe.timing.timed_words import TimedWord
from kvscribe.timing.words import (
    SegmentWords,
    WordTiming,
    as_words,
    clamp_at_sentence_ends,
    fit_to_segment,
    measure_durations,
    merge_punctuations,
    place_in_segments,
    split_words,
)
from kvscribe.types import Word

SECONDS_PER_FRAME = 0.01  # mel frames
SECONDS_PER_ENCODER_FRAME = 0.02  # the encoder halves the mel frames
SECONDS_PER_TIMESTAMP = 0.02
MEDIAN_FILTER_WIDTH = 7

# attend(encoded, ids, cross) -> (logits [len(ids), vocab], scores [alignment heads,
# len(ids), frames] before softmax), both numpy float32: one teacher-forced decoder pass
# over `ids` against a fresh full-precision self-attention cache. `cross`: the chunk's
# full-precision cross-attention store when the decode kept one, else None and the engine
# fills one from `encoded` (whatever its encoder returns for one window; opaque here).
Attend = Callable[[Any, list[int], CrossAttentionStore | None], tuple[np.ndarray, np.ndarray]]


class WordAligner:
    """Times the words of a window's segments (or of a chunk's text) from the window's
    encoder output, through `attend`."""

    def __init__(
        self,
        attend: Attend,
        special: SpecialTokens,
        decode_text: Callable[[list[int]], str],
    ) -> None:
        self.attend = attend
        self.special = special
        self.decode_text = decode_text

    def __call__(
        self,
        encoded: Any,
        segment_tokens: Sequence[Sequence[int]],
        window_frames: int,
        offset_seconds: float,
        *,
        sot_sequence: Sequence[int] | None = None,
        bounds: Sequence[tuple[float, float]] | None = None,
        last_speech: float | None = None,
    ) -> list[tuple[Word, ...]]:
        """One tuple of words per segment, times in seconds on the input's clock.

        `encoded` is the window's encoder output, as the engine's `attend` takes it;
        `segment_tokens` each segment's tokens as split_segments cut them (timestamps and
        specials are dropped here); `window_frames` the mel frames of audio the window holds
        (frames past it are padding and never chosen); `offset_seconds` the window's start.
        `sot_sequence`: the prompt the window was decoded with (needed for multilingual
        models: it names the language); `bounds`: the segments' absolute (start, end) if
        known (else read from their timestamp tokens); `last_speech`: where speech last
        ended before this window (default: the window's start). openai-whisper then moves
        each segment's bounds to its words': words[0].start and words[-1].end.
        """
        sot = tuple(sot_sequence) if sot_sequence is not None else self._default_sot()
        eot = self.special.eot
        texts = [[t for t in tokens if t < eot] for tokens in segment_tokens]
        text_tokens = [t for text in texts for t in text]
        if bounds is None:
            bounds = [
                self._token_bounds(tokens, window_frames, offset_seconds)
                for tokens in segment_tokens
            ]
        segments = [SegmentWords(start, end) for start, end in bounds]
        if not text_tokens:
            return [() for _ in segments]
        timings = self._align(encoded, sot, text_tokens, window_frames)
        durations = measure_durations(timings)
        clamp_at_sentence_ends(timings, durations)
        merge_punctuations(timings)
        place_in_segments(timings, segments, [len(text) for text in texts], offset_seconds)
        speech_end = offset_seconds if last_speech is None else last_speech
        for segment in segments:
            speech_end = fit_to_segment(segment, durations, speech_end)
        return [as_words(segment.words) for segment in segments]

    def chunk_words(
        self,
        encoded: Any,
        tokens: Sequence[int],
        window_frames: int,
        *,
        sot_sequence: Sequence[int] | None = None,
        cross: CrossAttentionStore | None = None,
    ) -> list[TimedWord]:
        """The words of a chunk decoded without timestamps, in seconds from its start, each
        with its tokens and punctuation merged into its neighbour as openai-whisper merges
        it (kvscribe.aligned_chunks tidies them and puts them on the original clock).
        `cross`: the chunk's full-precision cross-attention K/V if the decode kept them
        (CrossAttentionStore.one_chunk), else the engine projects them from `encoded`."""
        sot = tuple(sot_sequence) if sot_sequence is not None else self._default_sot()
        text_tokens = [t for t in tokens if t < self.special.eot]
        if not text_tokens:
            return []
        timings = self._align(encoded, sot, text_tokens, window_frames, cross)
        merge_punctuations(timings)
        return [
            TimedWord(t.start, t.end, t.word, float(t.probability), tuple(t.tokens))
            for t in timings
            if t.word
        ]

    def _align(
        self,
        encoded: Any,
        sot: tuple[int, ...],
        text_tokens: list[int],
        window_frames: int,
        cross: CrossAttentionStore | None = None,
    ) -> list[WordTiming]:
        """Word timings (seconds from the window's start) for the window's text tokens."""
        probabilities, matrix = self._attention_matrix(
            encoded, sot, text_tokens, window_frames, cross
        )
        token_rows, frames = dtw(-matrix)
        language = self._language_of(sot)
        words, groups = split_words(
            [*text_tokens, self.special.eot], self.decode_text, self.special.eot, language
        )
        if len(groups) <= 1:
            return []
        boundaries = np.concatenate([[0], np.cumsum([len(g) for g in groups[:-1]])])
        # The frame where DTW first reaches each token row is that token's start.
        jumps = np.diff(token_rows, prepend=-1).astype(bool)
        starts = frames[jumps] * SECONDS_PER_ENCODER_FRAME
        return [
            WordTiming(
                word,
                list(group),
                float(starts[first]),
                float(starts[after]),
                float(np.mean(probabilities[first:after])),
            )
            for word, group, first, after in zip(
                words, groups, boundaries[:-1], boundaries[1:], strict=False
            )
        ]

    def _attention_matrix(
        self,
        encoded: Any,
        sot: tuple[int, ...],
        text_tokens: list[int],
        window_frames: int,
        cross: CrossAttentionStore | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each text token's probability, and the alignment heads' smoothed attention
        [text tokens + 1, audio frames] (the last row is <|endoftext|>'s)."""
        special = self.special
        ids = [*sot, special.no_timestamps, *text_tokens, special.eot]
        logits, scores = self.attend(encoded, ids, cross)
        probabilities = _text_probabilities(logits, len(sot), text_tokens, special.eot)
        audio_frames = window_frames // 2  # encoder frames that hold audio, not padding
        weights = _softmax(scores[:, :, :audio_frames].astype(np.float32, copy=False))
        # Each head's weights standardised over the tokens (population std), as openai-whisper.
        mean = weights.mean(axis=-2, keepdims=True)
        std = weights.std(axis=-2, keepdims=True)
        weights = median_filter((weights - mean) / std, MEDIAN_FILTER_WIDTH)
        matrix = weights.mean(axis=0)[len(sot) : -1]
        return probabilities, matrix.astype(np.float64)

    def _default_sot(self) -> tuple[int, ...]:
        if self.special.is_multilingual:
            raise ValueError("a multilingual model's words need the window's sot_sequence")
        return (self.special.sot,)

    def _language_of(self, sot: tuple[int, ...]) -> str:
        by_id = {token: code for code, token in self.special.languages.items()}
        return next((by_id[t] for t in sot if t in by_id), "en")

    def _token_bounds(
        self, tokens: Sequence[int], window_frames: int, offset: float
    ) -> tuple[float, float]:
        """A segment's absolute bounds from its timestamp tokens (the window's edges when
        it has none), as split_segments reads them."""
        begin = self.special.timestamp_begin
        stamps = [t for t in tokens if t >= begin]
        start = (
            (tokens[0] - begin) * SECONDS_PER_TIMESTAMP if tokens and tokens[0] >= begin else 0.0
        )
        end = window_frames * SECONDS_PER_FRAME
        if len(stamps) > 1 or (stamps and stamps[-1] != begin and tokens[0] < begin):
            end = (stamps[-1] - begin) * SECONDS_PER_TIMESTAMP
        return offset + start, offset + end


def _text_probabilities(
    logits: np.ndarray, sot_length: int, text_tokens: list[int], eot: int
) -> np.ndarray:
    """The probability of each text token where it was predicted, over the text vocabulary
    (ids below <|endoftext|>). Row k predicts token k + 1: the rows from <|notimestamps|>
    on predict the text."""
    rows = logits[sot_length : sot_length + len(text_tokens), :eot].astype(np.float32)
    return _softmax(rows)[np.arange(len(text_tokens)), text_tokens]


def _softmax(x: np.ndarray) -> np.ndarray:
    """Softmax along the last axis, in x's dtype (one new array, worked on in place)."""
    out = x - x.max(axis=-1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=-1, keepdims=True)
    return out


# A selection network for the median of 7 (13 compare-exchanges; it selects the median of
# every 0/1 input, which by the 0-1 principle covers every input): openai-whisper's width.
_MEDIAN_OF_7 = (
    (0, 5), (0, 3), (1, 6), (2, 4), (0, 1), (3, 5), (2, 6),
    (2, 3), (3, 6), (4, 5), (1, 4), (1, 3), (3, 4),
)  # fmt: skip


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over a sliding window of `width` (odd) along the last axis, reflect-padded.

    The `width` shifted copies go through compare-exchanges elementwise, then the middle
    one is taken: for width 7 a median-selection network (13 exchanges), otherwise an
    odd-even transposition sort (`width` rounds sort any `width` values). The same values
    as sorting every window, in a fraction of the time.
    """
    pad = width // 2
    frames = x.shape[-1]
    if frames <= pad:  # reflect padding needs more frames than it adds
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    # Copies, not views of `padded` (they overlap): each exchange then writes in place.
    lanes = [padded[..., shift : shift + frames].copy() for shift in range(width)]
    spare = np.empty_like(lanes[0])
    exchanges = _MEDIAN_OF_7 if width == 7 else _transposition_sort(width)
    for low, high in exchanges:
        a, b = lanes[low], lanes[high]
        np.minimum(a, b, out=spare)
        np.maximum(a, b, out=b)
        lanes[low], spare = spare, a
    return lanes[pad]


def _transposition_sort(width: int) -> list[tuple[int, int]]:
    """Odd-even transposition sort of `width` lanes, as compare-exchange pairs."""
    return [(low, low + 1) for round_ in range(width) for low in range(round_ % 2, width - 1, 2)]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cheapest monotonic path through `cost` [rows, columns] from (0, 0) to the last cell,
    moving down, right, or diagonally: (row indices, column indices) along it.

    Row by row: within a row, total[j] = cost[j] + min(above[j], total[j - 1]) with
    above[j] = min(prev[j - 1], prev[j]); subtracting the row's prefix sums S turns it into
    a running minimum, total[j] - S[j] = min(above[j] - S[j - 1], total[j - 1] - S[j - 1]),
    so each row is one numpy accumulate instead of a Python loop over its cells.
    """
    rows, columns = cost.shape
    previous = np.full(columns + 1, np.inf)
    previous[0] = 0.0
    # step[i, j]: how cell (i, j) (1-based; 0 is the border) was reached: 0 diagonal,
    # 1 from above, 2 from the left. Ties go left, then diagonal, as openai-whisper's do.
    step = np.empty((rows + 1, columns + 1), dtype=np.int8)
    step[0, :] = 2
    step[:, 0] = 1
    for i in range(1, rows + 1):
        diagonal, up = previous[:-1], previous[1:]
        from_up = up < diagonal
        above = np.where(from_up, up, diagonal)
        sums = np.cumsum(cost[i - 1])
        shifted = np.concatenate([[0.0], sums[:-1]])  # S[j - 1]
        candidates = above - shifted
        running = np.minimum.accumulate(np.concatenate([[np.inf], candidates]))
        left = running[:-1] <= candidates  # the row's own previous cell is no worse
        current = np.empty(columns + 1)
        current[0] = np.inf
        current[1:] = running[1:] + sums
        step[i, 1:] = np.where(left, 2, np.where(from_up, 1, 0))
        previous = current
    return _backtrace(step)


def _backtrace(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    i, j = step.shape[0] - 1, step.shape[1] - 1
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        move = step[i, j]
        if move == 0:
            i, j = i - 1, j - 1
        elif move == 1:
            i -= 1
        else:
            j -= 1
    path.reverse()
    pairs = np.array(path, dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]
