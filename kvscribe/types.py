"""Typed results shared by every backend, writer and the stats report."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Word:
    """One word with its time span (seconds from the start of the input).

    `word` keeps its leading space as the tokenizer produced it (" Hello"), as
    openai-whisper and faster-whisper do; `probability` is the mean of its
    tokens' probabilities."""

    start: float
    end: float
    word: str
    probability: float


@dataclass(frozen=True)
class Segment:
    """One decoded stretch of speech.

    `start`/`end` are seconds from the start of the input; `tokens` are the
    decoder's text token ids (timestamp tokens excluded where the backend
    separates them); `window` is the 30 s window (index) it was decoded in and
    `seek` that window's start in mel frames (100 per second), as openai-whisper
    reports it. `temperature` is the one the accepted decode ran at (fallback)
    and `words` are filled when word timestamps were asked for.
    """

    id: int
    start: float
    end: float
    text: str
    tokens: tuple[int, ...] = ()
    avg_logprob: float | None = None
    no_speech_prob: float | None = None
    window: int = 0
    seek: int = 0
    temperature: float | None = None
    compression_ratio: float | None = None
    words: tuple[Word, ...] = ()


@dataclass
class Transcript:
    """A finished transcription of one input."""

    source: str
    language: str
    duration: float
    segments: list[Segment] = field(default_factory=list)
    language_probability: float | None = None  # None: given by --language, or not measured

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()
