"""Word timestamps from whisper-cli's token times, grouped and trimmed by kvscribe.timing.words.

With `-dtw PRESET` whisper.cpp aligns each window's text tokens to the audio by dynamic
time warping over the model's alignment heads (openai-whisper's method). It writes the
time where the DTW path *enters* a token's row as that token's `t_dtw`; since row k of
the matrix is the decoder position that predicts token k + 1 (row 0 is
<|notimestamps|>'s), that is the token's end in openai-whisper's terms, and a token's
start is the end of the token before it (the first: the window's start). Read that way,
after kvscribe.timing.words' trims, word starts differ from faster-whisper's own (same tiny.en,
beam 5) by a median of 0.00-0.02 s on samples/jfk.wav, three librivox eval clips and the
182 s long form, against 0.13-0.29 s from whisper.cpp's heuristic token times (`offsets`),
which are used only when no DTW preset fits the model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from kvscribe.backends.whispercpp.fulljson import JsonSegment, JsonToken, Vocabulary
from kvscribe.models.ct2_file import WhisperDims
from kvscribe.timing.words import (
    SegmentWords,
    WordTiming,
    clamp_at_sentence_ends,
    fit_to_segment,
    measure_durations,
    merge_punctuations,
    place_in_segments,
    split_words,
)

# whisper-cli's -dtw presets (examples/cli/cli.cpp, 1.8.5)
DTW_PRESETS = (
    "tiny",
    "tiny.en",
    "base",
    "base.en",
    "small",
    "small.en",
    "medium",
    "medium.en",
    "large.v1",
    "large.v2",
    "large.v3",
    "large.v3.turbo",
)
# (n_text_state, n_text_layer, n_mels) of openai's checkpoints; large v1 and v2 share theirs
_SIZES = {
    (384, 4, 80): "tiny",
    (512, 6, 80): "base",
    (768, 12, 80): "small",
    (1024, 24, 80): "medium",
    (1280, 32, 128): "large.v3",
    (1280, 4, 128): "large.v3.turbo",
}
_QUANT_SUFFIX = re.compile(r"[-_.](f16|f32|q\d(_\d|_k)?)$")
SECONDS_PER_CS = 0.01


@dataclass(frozen=True)
class DtwChoice:
    preset: str | None  # None: no preset fits; words use whisper.cpp's token times
    how: str  # for the report: how it was chosen


def dtw_preset(model_name: str, dims: WhisperDims) -> DtwChoice:
    """The -dtw preset for a model: by its name (tiny.en, ggml-base.bin, large-v3-turbo),
    else by its dimensions (a fine-tune keeps its base model's heads closely enough),
    except large v1/v2, which only a name tells apart."""
    name = PurePath(model_name).name.lower().removesuffix(".bin").removeprefix("ggml-")
    name = _QUANT_SUFFIX.sub("", name).replace("-", ".").replace("_", ".")
    if name in DTW_PRESETS:
        return DtwChoice(name, f"{name} (the model's name)")
    size = _SIZES.get((dims.n_text_state, dims.n_text_layer, dims.n_mels))
    if size is None:
        return DtwChoice(None, "none fits this model: whisper.cpp's heuristic token times")
    english_only = dims.n_vocab < 51865
    preset = f"{size}.en" if english_only and f"{size}.en" in DTW_PRESETS else size
    return DtwChoice(preset, f"{preset} (by the model's dimensions)")


def window_words(
    segments: Sequence[JsonSegment],
    seek_cs: int,
    shift_cs: int,
    vocab: Vocabulary,
    language: str,
    last_speech: float,
) -> tuple[list[SegmentWords], float]:
    """One window's segments with their words, as kvscribe.timing.words.SegmentWords (absolute
    seconds; bounds moved to the words' as openai-whisper does), and where speech ended.

    `seek_cs` is the window's absolute start; `shift_cs` what whisper.cpp left out of the
    tokens' times (the start of a part under -p; 0 otherwise).
    """

    texts = [[t for t in segment.tokens if vocab.is_text(t.id)] for segment in segments]
    placed = [
        SegmentWords(segment.start_cs * SECONDS_PER_CS, segment.end_cs * SECONDS_PER_CS)
        for segment in segments
    ]
    tokens = [token for text in texts for token in text]
    if not tokens:
        return placed, last_speech
    timings = _word_timings(tokens, seek_cs, shift_cs, language)
    durations = measure_durations(timings)
    clamp_at_sentence_ends(timings, durations)
    merge_punctuations(timings)
    place_in_segments(timings, placed, [len(text) for text in texts], seek_cs * SECONDS_PER_CS)
    for segment in placed:
        last_speech = fit_to_segment(segment, durations, last_speech)
    return placed, last_speech


def _word_timings(
    tokens: list[JsonToken], seek_cs: int, shift_cs: int, language: str
) -> list[WordTiming]:
    """Words (times from the window's start) over the window's text tokens. kvscribe.timing.words
    groups token ids; here the "ids" are positions in `tokens`, whose texts whisper-cli
    already joined into whole characters."""

    spans = _token_spans(tokens, seek_cs, shift_cs)
    positions = list(range(len(tokens)))
    words, groups = split_words(
        positions, lambda ids: "".join(tokens[i].text for i in ids), len(tokens), language
    )
    return [
        WordTiming(
            word,
            list(group),
            spans[group[0]][0],
            spans[group[-1]][1],
            sum(tokens[i].p for i in group) / len(group),
        )
        for word, group in zip(words, groups, strict=True)
    ]


def _token_spans(tokens: list[JsonToken], seek_cs: int, shift_cs: int) -> list[tuple[float, float]]:
    """(start, end) of each token in seconds from the window's start: DTW's where every
    token has one, else whisper.cpp's heuristic token times."""
    origin = seek_cs - shift_cs  # the window's start on the tokens' own clock
    if all(token.dtw_cs is not None for token in tokens):
        ends = [(token.dtw_cs or 0) - origin for token in tokens]
        starts = [0, *ends[:-1]]
    else:
        starts = [_or(token.start_cs, origin) - origin for token in tokens]
        ends = [_or(token.end_cs, origin) - origin for token in tokens]
    return [
        (max(0, start) * SECONDS_PER_CS, max(0, start, end) * SECONDS_PER_CS)
        for start, end in zip(starts, ends, strict=True)
    ]


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
