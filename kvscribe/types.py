"""Typed results shared by every backend, writer and the stats report."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Segment:
    """One decoded stretch of speech.

    `start`/`end` are seconds from the start of the input; `tokens` are the
    decoder's text token ids (timestamp tokens excluded where the backend
    separates them); `window` is the 30 s window (index) it was decoded in.
    """

    id: int
    start: float
    end: float
    text: str
    tokens: tuple[int, ...] = ()
    avg_logprob: float | None = None
    no_speech_prob: float | None = None
    window: int = 0


@dataclass
class Transcript:
    """A finished transcription of one input."""

    source: str
    language: str
    duration: float
    segments: list[Segment] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()
