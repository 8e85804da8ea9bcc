"""whisper-cli's full JSON (`-ojf`): every segment with its tokens, their probabilities,
their heuristic times and, with `-dtw`, their DTW times.

Token times and ids as whisper.cpp 1.8.5 writes them: `offsets` in ms (present when token
timestamps ran, which -ojf turns on), `p` the token's probability, `t_dtw` in centiseconds
(-1 without DTW). Tokens that end mid-UTF-8 character are merged by whisper-cli into one
entry with the first token's id, so such a character keeps one id only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

ENGLISH_EOT = 50256  # <|endoftext|> of the English-only vocabulary; multilingual: one more
ENGLISH_BEG = 50363  # the first timestamp token, <|0.00|>, of the English-only vocabulary
# whisper.cpp's vocabulary sizes: 51765 + number of languages (+ 1 when multilingual)
_BASE_VOCAB = 51765
_BASE_LANGUAGES = 98
_LOWEST_P = 1e-10  # a printed probability of 0 is below its precision, not impossible
_LANGUAGE_LINE = re.compile(r"auto-detected language: (\w+) \(p = ([\d.]+)\)")


@dataclass(frozen=True)
class Vocabulary:
    """Where the special tokens start for a model of `n_vocab` tokens (whisper.cpp's
    layout: the multilingual vocabulary has one more ordinary token and a language token
    per language beyond 98)."""

    n_vocab: int

    @property
    def multilingual(self) -> bool:
        return self.n_vocab >= 51865

    @property
    def eot(self) -> int:
        return ENGLISH_EOT + int(self.multilingual)

    @property
    def timestamp_begin(self) -> int:
        if not self.multilingual:
            return ENGLISH_BEG
        languages = self.n_vocab - _BASE_VOCAB - 1
        return ENGLISH_BEG + languages - _BASE_LANGUAGES

    def is_text(self, token: int) -> bool:
        return token < self.eot

    def timestamp(self, token: int) -> int | None:
        """The timestamp token's position in 20 ms steps from its window's start; None for
        other tokens."""
        step = token - self.timestamp_begin
        return step if step >= 0 else None


@dataclass(frozen=True)
class JsonToken:
    id: int
    text: str
    p: float
    start_cs: int | None  # whisper.cpp's heuristic token times, centiseconds (None: absent)
    end_cs: int | None
    dtw_cs: int | None  # the DTW time (the token's end, see kvscribe.backends.whispercpp.words)

    @property
    def logprob(self) -> float:
        return math.log(max(self.p, _LOWEST_P))

    def shifted(self, cs: int) -> JsonToken:
        return dataclasses.replace(
            self,
            start_cs=_plus(self.start_cs, cs),
            end_cs=_plus(self.end_cs, cs),
            dtw_cs=_plus(self.dtw_cs, cs),
        )


@dataclass(frozen=True)
class JsonSegment:
    start_cs: int
    end_cs: int
    text: str
    tokens: tuple[JsonToken, ...] = ()

    def shifted(self, cs: int) -> JsonSegment:
        """The segment `cs` centiseconds later, its tokens' times too (a piece's segments
        moved onto the input's clock)."""
        if cs == 0:
            return self
        tokens = tuple(token.shifted(cs) for token in self.tokens)
        return JsonSegment(self.start_cs + cs, self.end_cs + cs, self.text, tokens)


@dataclass
class FullResult:
    language: str
    segments: list[JsonSegment] = field(default_factory=list)

    @property
    def decoded_tokens(self) -> int:
        """Every token the decoder emitted, timestamps included."""
        return sum(len(segment.tokens) for segment in self.segments)


def read(path: Path) -> FullResult:
    """Parse an -ojf file (whisper-cli escapes quotes and backslashes only, so control
    characters in text are tolerated)."""
    data = json.loads(path.read_text(encoding="utf-8", errors="replace"), strict=False)
    segments = [_segment(item) for item in data.get("transcription", [])]
    return FullResult(data.get("result", {}).get("language", ""), segments)


def detected_language(stderr: str) -> tuple[str, float] | None:
    """whisper.cpp's "auto-detected language: de (p = 0.970282)" (multilingual models,
    no language given); None when it did not detect one."""
    match = _LANGUAGE_LINE.search(stderr)
    return (match[1], float(match[2])) if match else None


def _segment(item: dict) -> JsonSegment:
    offsets = item.get("offsets", {})
    tokens = tuple(_token(token) for token in item.get("tokens", []))
    return JsonSegment(
        _centiseconds(offsets.get("from", 0)),
        _centiseconds(offsets.get("to", 0)),
        item.get("text", ""),
        tokens,
    )


def _token(item: dict) -> JsonToken:
    offsets = item.get("offsets")
    dtw = int(item.get("t_dtw", -1))
    return JsonToken(
        id=int(item["id"]),
        text=item.get("text", ""),
        p=float(item.get("p", 0.0)),
        start_cs=_centiseconds(offsets["from"]) if offsets else None,
        end_cs=_centiseconds(offsets["to"]) if offsets else None,
        dtw_cs=dtw if dtw >= 0 else None,
    )


def _plus(value: int | None, cs: int) -> int | None:
    return None if value is None else value + cs


def _centiseconds(milliseconds: int | float) -> int:
    return round(float(milliseconds) / 10)
