"""What every transcript writer shares: the layout options, times rounded as the JSON
holds them, clocks, and text cleaned for a line or a cue (kvscribe/writers.py,
kvscribe/subtitles.py)."""

from __future__ import annotations

from dataclasses import dataclass

from kvscribe.errors import UsageError
from kvscribe.types import Transcript


@dataclass(frozen=True)
class WriterOptions:
    """How subtitles and tsv are laid out; every option needs word timestamps.

    None turns a limit off. As in openai-whisper, cues follow segments unless both
    `max_line_width` and `max_line_count` are set; `max_words_per_line` then has no
    effect (openai-whisper ignores it there too). Without words in the transcript
    every option is ignored and cues are segments. `word_level_tsv` writes one tsv
    row per word instead of per segment.
    """

    highlight_words: bool = False
    max_line_width: int | None = None
    max_line_count: int | None = None
    max_words_per_line: int | None = None
    word_level_tsv: bool = False

    def __post_init__(self) -> None:
        for flag, value in (
            ("--max-line-width", self.max_line_width),
            ("--max-line-count", self.max_line_count),
            ("--max-words-per-line", self.max_words_per_line),
        ):
            if value is not None and value < 1:
                raise UsageError(
                    f"must be at least 1, got {value}",
                    subject=flag,
                    hint="give a positive number or leave the option out",
                )

    @property
    def preserve_segments(self) -> bool:
        return self.max_line_count is None or self.max_line_width is None


DEFAULT_OPTIONS = WriterOptions()


def seconds_as_written(value: float) -> float:
    """Times as the JSON holds them; subtitles and tsv use the same rounded values."""
    return round(float(value), 3)


def milliseconds(seconds: float) -> int:
    return max(0, round(seconds_as_written(seconds) * 1000))


def clock(ms: int, *, always_hours: bool, marker: str) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    head = f"{hours:02d}:" if always_hours or hours else ""
    return f"{head}{minutes:02d}:{secs:02d}{marker}{millis:03d}"


def timestamp(seconds: float, *, always_hours: bool = True, marker: str = ".") -> str:
    """`HH:MM:SS.mmm` (hours optional when zero), rounded to the millisecond."""
    return clock(max(0, round(seconds * 1000)), always_hours=always_hours, marker=marker)


def clean(text: str) -> str:
    # A cue may not contain "-->" (it would read as a timing line) nor blank lines.
    return " ".join(text.replace("-->", "->").split())


def clean_word(text: str) -> str:
    # Keeps the leading space the tokenizer gave the word: it separates words in a line.
    return text.replace("-->", "->").replace("\r", " ").replace("\n", " ").replace("\t", " ")


def has_words(t: Transcript) -> bool:
    """Word timestamps were decoded for this transcript."""
    return any(s.words for s in t.segments)
