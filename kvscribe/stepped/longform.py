"""Long-form transcription: 30 s windows, a fresh decoder cache per window (and per
fallback attempt), previous-text prompts, temperature fallback (kvscribe/stepped/fallback.py),
and openai-whisper's rules for cutting segments at timestamp tokens and seeking.

The engine enters through the plan: `encode` (a log-mel window to whatever the engine's
`fill_cross` puts into a CrossAttentionStore) and `setup.decoder` (kvscribe.stepped.search's
step interface), on torch tensors or numpy arrays (kvscribe.arrays)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kvscribe import setting_rows as row
from kvscribe.audio.mel import FRAMES_PER_WINDOW
from kvscribe.decoding import PROMPT_MAX, Fallback
from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.kvcache.spec import CrossSpec, LayerSpec
from kvscribe.models.vocab import SpecialTokens
from kvscribe.stepped import fallback
from kvscribe.stepped.search import SearchSetup, WindowResult, sample, search
from kvscribe.types import Segment, Word

SECONDS_PER_FRAME = 0.01
SECONDS_PER_TIMESTAMP = 0.02
FRAMES_PER_TIMESTAMP = 2

# kvscribe/stepped/alignment.py's WordAligner: (encoded window, each segment's
# tokens, window frames, offset s, *, sot_sequence, bounds, last_speech) -> one tuple of
# Words per segment, on the input's clock.
AlignWords = Callable[..., list[tuple[Word, ...]]]


@dataclass(frozen=True)
class WindowPlan:
    """Everything fixed for one input: how to encode, which cache, which prompt."""

    encode: Callable[[Any], Any]  # a window's log-mel [n_mels, 3000] -> what fill_cross takes
    setup: SearchSetup
    # Put an encoded window's (or chunks') cross-attention K/V into a store, as its spec keeps them.
    fill_cross: Callable[[CrossAttentionStore, Any], None]
    special: SpecialTokens
    sot_sequence: tuple[int, ...]
    self_specs: tuple[LayerSpec, ...]
    cross_spec: CrossSpec
    beams: int
    condition: bool
    text_ctx: int
    kv_bytes_per_position: int  # K+V of one position in every layer, one beam
    fallback: Fallback = field(default_factory=Fallback)
    align_words: AlignWords | None = None  # set when word timestamps are asked for
    hotwords: tuple[int, ...] = ()  # prompt tokens before any previous text (--hotwords)
    max_new_tokens: int | None = None  # --max-new-tokens: at most this many per window
    # False: decoded without timestamp tokens (<|notimestamps|> after the sot sequence), the
    # batched chunks' way: times then come from alignment (kvscribe.aligned_chunks).
    timestamps: bool = True

    def prompt_for(self, history: list[int]) -> list[int]:
        """The decoder prompt: <|startofprev|>, the hotwords, the last PROMPT_MAX tokens of
        `history` (faster-whisper's order), the sot sequence, and <|notimestamps|> when
        decoding without timestamps."""
        before = [*self.hotwords, *history[-PROMPT_MAX:]]
        prompt = ([self.special.sot_prev, *before] if before else []) + list(self.sot_sequence)
        return prompt if self.timestamps else [*prompt, self.special.no_timestamps]

    def sot_index(self, prompt: list[int]) -> int:
        """Where <|startoftranscript|> sits in a prompt made by prompt_for()."""
        return len(prompt) - len(self.sot_sequence) - (0 if self.timestamps else 1)

    def max_new(self, prompt_length: int) -> int:
        """Tokens a window may decode after a prompt of `prompt_length`: half the text
        context (openai-whisper's sample_len), or fewer when asked."""
        limit = min(self.text_ctx // 2, self.text_ctx - prompt_length)
        return limit if self.max_new_tokens is None else min(limit, self.max_new_tokens)


@dataclass
class WindowStats:
    windows: int = 0
    tokens: int = 0  # decoder steps of every attempt (a re-decoded window counts again)
    fallback_attempts: int = 0  # windows (or chunks) decoded again at a higher temperature
    encoder_seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)
    self_peak_bytes: int = 0
    self_full_bytes: int = 0
    cross_bytes: int = 0
    recompute_macs: int = 0
    started: float = field(default_factory=time.perf_counter)
    first_token_seconds: float | None = None
    kv_trace: list[tuple[int, int]] = field(default_factory=list)  # of the longest window
    unread: list = field(default_factory=list)  # stretches no read transcribed (rereads)

    def fill(self, report) -> None:
        """Copy what was counted into the input's DecoderReport."""
        report.tokens, report.windows = self.tokens, self.windows
        report.kv_self_peak_bytes = self.self_peak_bytes
        report.kv_self_full_bytes = self.self_full_bytes
        report.kv_cross_bytes = self.cross_bytes
        report.encoder_seconds = self.encoder_seconds
        report.step_seconds = self.step_seconds
        report.recompute_macs = self.recompute_macs
        report.first_token_seconds = self.first_token_seconds
        report.kv_trace = self.kv_trace
        report.settings[row.FALLBACK_REDECODES] = str(self.fallback_attempts)
        for part in self.unread:
            report.left_unread(part)


def transcribe(
    plan: WindowPlan,
    mel,
    decode_text: Callable[[list[int]], str],
    stats: WindowStats,
    prompt: list[int] | None = None,
) -> Iterator[Segment]:
    """Yield segments of `mel` [n_mels, frames incl. 30 s padding] as each window is decoded.

    `prompt`: tokens of text said before this audio (openai-whisper's initial prompt): the
    first decoded window sees them, later ones only while conditioning on previous text,
    until a window needed a high temperature (the prompt resets, as openai-whisper's does).
    """
    content_frames = mel.shape[-1] - FRAMES_PER_WINDOW
    seek, history, next_id = 0, list(prompt or ()), 0
    last_speech = None  # where the last word ended (openai-whisper's last_speech_timestamp)
    while seek < content_frames:
        window_frames = min(FRAMES_PER_WINDOW, content_frames - seek)
        encoded = encode_timed(plan, mel[:, seek : seek + FRAMES_PER_WINDOW], stats)
        window = stats.windows
        stats.windows += 1
        attempts = _decode_with_fallback(plan, encoded, history, stats, decode_text, seek)
        kept = plan.fallback.kept(attempts)
        if plan.fallback.is_silence(kept.no_speech_prob, kept.avg_logprob):
            seek += window_frames  # silence: nothing to say here
            continue
        pieces, advance = split_segments(kept.tokens, plan.special.timestamp_begin, window_frames)
        texts = [decode_text([t for t in tokens if t < plan.special.eot]) for *_, tokens in pieces]
        spoken = [(piece, text) for piece, text in zip(pieces, texts, strict=True) if text.strip()]
        offset = seek * SECONDS_PER_FRAME
        bounds = [(offset + start, offset + end) for (start, end, _), _ in spoken]
        tokens_of = [tokens for (*_, tokens), _ in spoken]
        words = _words(plan, encoded, tokens_of, window_frames, offset, bounds, last_speech)
        for ((_, _, tokens), text), (start, end), said in zip(spoken, bounds, words, strict=True):
            if said:  # openai-whisper: a segment spans its words when they are timed
                start, end = said[0].start, said[-1].end
                last_speech = end
            yield Segment(
                next_id,
                start,
                end,
                text,
                tuple(tokens),
                kept.avg_logprob,
                kept.no_speech_prob,
                window,
                seek=seek,
                temperature=kept.temperature,
                compression_ratio=kept.compression_ratio,
                words=said,
            )
            next_id += 1
            history.extend(tokens)
        if not plan.condition or fallback.resets_prompt(attempts):
            history = []
        seek += advance


def _words(
    plan: WindowPlan,
    encoded,
    segment_tokens: list[list[int]],
    window_frames: int,
    offset: float,
    bounds: list[tuple[float, float]],
    last_speech: float | None,
) -> list[tuple[Word, ...]]:
    """Each segment's words when they were asked for (else none), from the window's own
    encoder output (the encoder does not run again); `bounds`: the segments' (start, end)
    on the input's clock."""
    if plan.align_words is None or not segment_tokens:
        return [() for _ in segment_tokens]
    return plan.align_words(
        encoded,
        segment_tokens,
        window_frames,
        offset,
        sot_sequence=plan.sot_sequence,
        bounds=bounds,
        last_speech=last_speech,
    )


def encode_timed(plan: WindowPlan, mel, stats: WindowStats):
    """plan.encode(mel) (one window, or a batch of chunks' windows), its time counted."""
    started = time.perf_counter()
    encoded = plan.encode(mel)
    stats.encoder_seconds += time.perf_counter() - started
    return encoded


def _decode_with_fallback(
    plan: WindowPlan,
    encoded,
    history: list[int],
    stats: WindowStats,
    decode_text: Callable[[list[int]], str],
    seek: int,
) -> list[fallback.Attempt]:
    """Decode the window at each temperature in turn until an attempt is final; all of
    them, in order (the last one final, or every temperature tried)."""
    prompt = plan.prompt_for(history)
    attempts: list[fallback.Attempt] = []
    for index, temperature in enumerate(fallback.temperatures(plan.fallback)):
        stats.fallback_attempts += 1 if index else 0
        generator = fallback.generator(plan.setup.device, seek, index)
        result = _decode_window(plan, encoded, prompt, stats, temperature, generator)
        text = decode_text([t for t in result.tokens if t < plan.special.eot])
        attempts.append(
            fallback.attempt_of(
                result.tokens, result.avg_logprob, result.no_speech_prob, temperature, text
            )
        )
        if plan.fallback.is_final(attempts[-1]):
            break
    return attempts


def _decode_window(
    plan: WindowPlan,
    encoded,
    prompt: list[int],
    stats: WindowStats,
    temperature: float,
    generator,
) -> WindowResult:
    """One attempt: beam search (or greedy) at temperature 0, else `best_of` samples; a
    fresh cache under the plan's policies either way."""
    rows = plan.beams if temperature == 0 else plan.fallback.best_of
    cross = CrossAttentionStore(plan.cross_spec, rows)
    plan.fill_cross(cross, encoded)
    cache = PolicyCache(plan.self_specs)
    sot_index = plan.sot_index(prompt)
    max_new = plan.max_new(len(prompt))
    search_started = time.perf_counter()
    if temperature == 0:
        result = search(plan.setup, prompt, sot_index, cache, cross, plan.beams, max_new)
        steps, decoded = result.step_seconds, len(result.tokens) + 1
    else:
        (result,) = sample(
            plan.setup, prompt, sot_index, cache, cross, temperature, [generator], max_new
        )
        steps = result.step_seconds
        decoded = len(steps)  # every step fed all candidates: counted as beams are
    if stats.first_token_seconds is None and steps:
        stats.first_token_seconds = search_started + steps[0] - stats.started
    positions = cache.get_seq_length()  # every position fed, for the longest-lived row
    stats.tokens += decoded
    stats.step_seconds.extend(steps)
    stats.self_peak_bytes = max(stats.self_peak_bytes, cache.peak_bytes)
    stats.self_full_bytes = max(
        stats.self_full_bytes, positions * rows * plan.kv_bytes_per_position
    )
    stats.cross_bytes = max(stats.cross_bytes, cross.held_bytes)
    stats.recompute_macs += cache.recompute_macs
    if len(cache.trace) > len(stats.kv_trace):
        stats.kv_trace = cache.trace
    return result


def split_segments(tokens: list[int], ts_begin: int, window_frames: int):
    """Cut sampled tokens into (start s, end s, tokens) at timestamp pairs; also how far to seek.

    A window ending in a lone timestamp was fully transcribed (seek a whole window);
    otherwise the last segment is incomplete and decoding resumes at its start.
    """
    is_ts = [t >= ts_begin for t in tokens]
    single_ending = len(is_ts) >= 2 and is_ts[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]
    if not cuts:
        stamps = [t for t in tokens if t >= ts_begin]
        end = window_frames * SECONDS_PER_FRAME
        if stamps and stamps[-1] != ts_begin:
            end = (stamps[-1] - ts_begin) * SECONDS_PER_TIMESTAMP
        return [(0.0, end, tokens)] if tokens else [], window_frames
    if single_ending:
        cuts.append(len(tokens))
    pieces, last = [], 0
    for cut in cuts:
        piece = tokens[last:cut]
        start = (piece[0] - ts_begin) * SECONDS_PER_TIMESTAMP
        end = (piece[-1] - ts_begin) * SECONDS_PER_TIMESTAMP
        pieces.append((start, end, piece))
        last = cut
    if single_ending:
        return pieces, window_frames
    advance = (tokens[last - 1] - ts_begin) * FRAMES_PER_TIMESTAMP
    return pieces, advance if advance > 0 else window_frames  # never stall on a 0.00 stamp
