"""Long-form transcription: 30 s windows, a fresh decoder cache per window, previous-text
prompts, and openai-whisper's rules for cutting segments at timestamp tokens and seeking."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.kvcache.spec import CrossSpec, LayerSpec
from kvscribe.mel import FRAMES_PER_WINDOW
from kvscribe.models.vocab import SpecialTokens
from kvscribe.types import Segment

from .search import SearchSetup, WindowResult, search

SECONDS_PER_FRAME = 0.01
SECONDS_PER_TIMESTAMP = 0.02
FRAMES_PER_TIMESTAMP = 2
PROMPT_MAX = 223  # n_text_ctx // 2 - 1 previous tokens
NO_SPEECH_THRESHOLD = 0.6
LOGPROB_THRESHOLD = -1.0


@dataclass(frozen=True)
class WindowPlan:
    """Everything fixed for one input: how to encode, which cache, which prompt."""

    encode: Callable[[torch.Tensor], torch.Tensor]  # [n_mels, 3000] -> [1, frames, d]
    setup: SearchSetup
    decoder_module: object  # the transformers WhisperDecoder (for cross-attention projections)
    special: SpecialTokens
    sot_sequence: tuple[int, ...]
    self_specs: tuple[LayerSpec, ...]
    cross_spec: CrossSpec
    beams: int
    condition: bool
    text_ctx: int
    kv_bytes_per_position: int  # K+V of one position in every layer, one beam


@dataclass
class WindowStats:
    windows: int = 0
    tokens: int = 0
    encoder_seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)
    self_peak_bytes: int = 0
    self_full_bytes: int = 0
    cross_bytes: int = 0
    recompute_macs: int = 0
    started: float = field(default_factory=time.perf_counter)
    first_token_seconds: float | None = None
    kv_trace: list[tuple[int, int]] = field(default_factory=list)  # of the longest window


def transcribe(
    plan: WindowPlan,
    mel: torch.Tensor,
    decode_text: Callable[[list[int]], str],
    stats: WindowStats,
    prompt: list[int] | None = None,
) -> Iterator[Segment]:
    """Yield segments of `mel` [n_mels, frames incl. 30 s padding] as each window is decoded.
    `prompt`: tokens of text said before this audio (the first window always sees them)."""
    content_frames = mel.shape[-1] - FRAMES_PER_WINDOW
    seek, history, next_id = 0, list(prompt or ()), 0
    while seek < content_frames:
        window_frames = min(FRAMES_PER_WINDOW, content_frames - seek)
        context = history if plan.condition or seek == 0 else []
        result = _decode_window(plan, mel[:, seek : seek + FRAMES_PER_WINDOW], context, stats)
        if result.no_speech_prob > NO_SPEECH_THRESHOLD and result.avg_logprob < LOGPROB_THRESHOLD:
            seek += window_frames  # silence: nothing to say here
            continue
        pieces, advance = split_segments(result.tokens, plan.special.timestamp_begin, window_frames)
        for start, end, tokens in pieces:
            text = decode_text([t for t in tokens if t < plan.special.eot])
            if not text.strip():
                continue
            offset = seek * SECONDS_PER_FRAME
            yield Segment(
                next_id,
                offset + start,
                offset + end,
                text,
                tuple(tokens),
                result.avg_logprob,
                result.no_speech_prob,
                stats.windows - 1,
            )
            next_id += 1
            history.extend(tokens)
        seek += advance


def _decode_window(
    plan: WindowPlan, window_mel: torch.Tensor, history: list[int], stats: WindowStats
) -> WindowResult:
    started = time.perf_counter()
    encoded = plan.encode(window_mel)
    stats.encoder_seconds += time.perf_counter() - started
    cross = CrossAttentionStore(plan.cross_spec, plan.beams)
    cross.fill(encoded, plan.decoder_module)
    cache = PolicyCache(plan.self_specs)
    prompt = []
    if history:
        prompt = [plan.special.sot_prev, *history[-PROMPT_MAX:]]
    prompt += plan.sot_sequence
    sot_index = len(prompt) - len(plan.sot_sequence)
    max_new = min(plan.text_ctx // 2, plan.text_ctx - len(prompt))
    search_started = time.perf_counter()
    result = search(plan.setup, prompt, sot_index, cache, cross, plan.beams, max_new)
    if stats.first_token_seconds is None and result.step_seconds:
        stats.first_token_seconds = search_started + result.step_seconds[0] - stats.started
    positions = cache.get_seq_length()  # every position fed, for the longest-lived beam
    stats.windows += 1
    stats.tokens += len(result.tokens) + 1
    stats.step_seconds.extend(result.step_seconds)
    stats.self_peak_bytes = max(stats.self_peak_bytes, cache.peak_bytes)
    stats.self_full_bytes = max(
        stats.self_full_bytes, positions * plan.beams * plan.kv_bytes_per_position
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
