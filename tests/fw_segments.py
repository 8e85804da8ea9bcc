"""faster-whisper's own Segment and Word, built for tests of what kvscribe does with the
segments its `transcribe` yields (halves.py, stretched.py)."""

from __future__ import annotations

from faster_whisper.transcribe import Segment, Word


def fw_word(start: float, end: float, text: str, probability: float = 0.9) -> Word:
    return Word(start=start, end=end, word=text, probability=probability)


def fw_segment(
    words: list[Word],
    tokens: list[int],
    seek: int = 0,
    text: str | None = None,
    end: float | None = None,
    avg_logprob: float = -0.2,
    no_speech_prob: float = 0.01,
) -> Segment:
    """A segment of `words` (its text theirs, its span from the first's start to the last's
    end, unless given), decoded at temperature 0."""
    return Segment(
        id=1,
        seek=seek,
        start=words[0].start,
        end=words[-1].end if end is None else end,
        text="".join(w.word for w in words) if text is None else text,
        tokens=tokens,
        avg_logprob=avg_logprob,
        compression_ratio=1.1,
        no_speech_prob=no_speech_prob,
        words=words,
        temperature=0.0,
    )
