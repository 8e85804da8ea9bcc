"""LocalAgreement (Whisper-Streaming, Macháček et al. 2023): re-decode a growing audio buffer
and commit the longest prefix on which two consecutive hypotheses agree.

Words carry their end times: the backend's word timestamps (live mode asks for them), or,
from a backend that gave none, an estimate (the segment's span shared out by characters,
good to a few hundred ms). They hold back the newest words and find where a committed
sentence ends in the audio, which is where the buffer is cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvscribe.timing.words import normalized
from kvscribe.types import Segment

_SENTENCE_END = (".", "?", "!", "\u3002", "\uff1f", "\uff01")  # and CJK full stops
_ECHO = 3  # words a new buffer may repeat from the end of the text cut off before it
# A timed word that starts with these belongs to the one before it: Whisper's word timing
# splits "cold-hearted" into "cold" and "-hearted", which committed text must not space.
_ATTACHED = ("-", "'")
# What a stretch of speech can hold (Hypothesis.within): words at a fast speaker's rate,
# ending at most this long after it (the VAD's pad, a word's timed end).
_MAX_WORDS_PER_SECOND = 4
_END_SLACK = 0.3
# An utterance's last words the decoder read under an even chance, in its last second, are
# read again with the speech after them when more follows soon (unsure_from): decoded
# without what follows, Whisper flips such a word ("ask not" read "asked not" where JFK
# pauses after it), and a file run, which reads it with what follows, does not.
UNSURE_PROBABILITY = 0.5
UNSURE_WITHIN = 1.0


def ends_sentence(word: str) -> bool:
    return word.endswith(_SENTENCE_END)


@dataclass(frozen=True)
class Hypothesis:
    """The decoder's reading of the buffer: words and their estimated ends (seconds from the
    buffer start)."""

    words: tuple[str, ...]
    ends: tuple[float, ...]
    timed: bool = False  # the ends are the backend's word timestamps, not an estimate
    # Each word's probability where the backend timed it (the least of a joined word's
    # parts), else empty.
    probabilities: tuple[float, ...] = ()

    @classmethod
    def from_decode(cls, segments: list[Segment]) -> Hypothesis:
        """The words of decoded segments, with their timed ends where the backend timed them."""
        if segments and all(s.words for s in segments if s.text.strip()):
            timed: list[tuple[str, float, float]] = []
            for word in (w for s in segments for w in s.words if w.word.strip()):
                if timed and word.word.startswith(_ATTACHED):  # "cold" "-hearted": one word
                    text, _, probability = timed[-1]
                    timed[-1] = (
                        text + word.word.strip(),
                        word.end,
                        min(probability, word.probability),
                    )
                else:
                    timed.append((word.word.strip(), word.end, word.probability))
            words, ends, probabilities = zip(*timed, strict=True) if timed else ((), (), ())
            return cls(tuple(words), tuple(ends), True, tuple(probabilities))
        return cls.from_segments([(s.text, s.start, s.end) for s in segments])

    @classmethod
    def from_segments(cls, segments: list[tuple[str, float, float]]) -> Hypothesis:
        """(text, start, end) per segment -> words with ends shared out by characters."""
        words: list[str] = []
        ends: list[float] = []
        for text, start, end in segments:
            parts = text.split()
            total, done = sum(len(w) + 1 for w in parts), 0
            for word in parts:
                done += len(word) + 1
                words.append(word)
                ends.append(start + (end - start) * done / total)
        return cls(tuple(words), tuple(ends))

    def after(self, count: int, seconds: float) -> Hypothesis:
        """Without its first `count` words, timed from `seconds` later."""
        ends = tuple(t - seconds for t in self.ends[count:])
        return Hypothesis(self.words[count:], ends, self.timed, self.probabilities[count:])

    def within(self, seconds: float) -> Hypothesis:
        """The words that `seconds` of speech can hold: those ending within them (and the
        pad after), at most _MAX_WORDS_PER_SECOND of them a second."""
        most = math.ceil(seconds * _MAX_WORDS_PER_SECOND)
        kept = [i for i, end in enumerate(self.ends) if end <= seconds + _END_SLACK][:most]
        probabilities = tuple(self.probabilities[i] for i in kept) if self.probabilities else ()
        return Hypothesis(
            tuple(self.words[i] for i in kept),
            tuple(self.ends[i] for i in kept),
            self.timed,
            probabilities,
        )

    def followed_by(self, rest: Hypothesis, seconds: float) -> Hypothesis:
        """This reading, then `rest`: a reading of the buffer from `seconds` in."""
        ends = self.ends + tuple(seconds + t for t in rest.ends)
        both = bool(self.probabilities or not self.words) and bool(
            rest.probabilities or not rest.words
        )
        probabilities = self.probabilities + rest.probabilities if both else ()
        return Hypothesis(self.words + rest.words, ends, self.timed and rest.timed, probabilities)

    def unsure_from(self, first: int) -> int:
        """Where its unsure last words begin, from word `first` on: the first word under
        UNSURE_PROBABILITY that ends within UNSURE_WITHIN s of its last word's end (its
        length when none, or when the backend gave no probabilities)."""
        if len(self.probabilities) != len(self.words) or not self.words:
            return len(self.words)
        horizon = self.ends[-1] - UNSURE_WITHIN
        for index in range(first, len(self.words)):
            if self.ends[index] > horizon and self.probabilities[index] < UNSURE_PROBABILITY:
                return index
        return len(self.words)


def _alike(a: str, b: str) -> bool:
    """The same word, read again: equal once normalized, or one of four letters or more
    that the other extends by a letter or two ("American" / "Americans.")."""
    x, y = normalized(a), normalized(b)
    short, long = sorted((x, y), key=len)
    return x == y or (len(short) >= 4 and long.startswith(short) and len(long) - len(short) <= 2)


def common_prefix(a: list[str], b: list[str]) -> int:
    """How many leading words `a` and `b` share, compared normalized."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if normalized(x) != normalized(y):
            break
        count += 1
    return count


class LocalAgreement:
    """What of the current buffer is committed, and what is still tentative."""

    def __init__(self) -> None:
        self.committed: list[str] = []  # committed words heard in the current buffer
        self.latest: Hypothesis | None = None
        self._aligned = 0  # latest.words[:_aligned] are the committed words
        self._previous_tail: list[str] | None = None
        self._cut_off: list[str] = []  # the last words cut off before the buffer
        self._heard = 0.0  # the buffer's first seconds, committed before it (see `after`)

    @classmethod
    def after(cls, seconds: float, last: list[str]) -> LocalAgreement:
        """For a buffer whose first `seconds` hold speech committed already, ending with the
        words `last` (live mode's context): words the decoder ends before then are skipped,
        whatever it reads there, and so are those of `last` it repeats just after (a word
        before a pause may be timed into the pause)."""
        agreement = cls()
        agreement._heard = seconds
        agreement._cut_off = list(last[-_ECHO:])
        return agreement

    @property
    def tentative(self) -> list[str]:
        return [] if self.latest is None else list(self.latest.words[self._aligned :])

    def update(self, hypothesis: Hypothesis, hold: float = 0.0) -> list[str]:
        """Take a new hypothesis; return the words it newly commits: those it shares with the
        previous one and that it follows with at least `hold` seconds of further words
        (Whisper rereads a word once it hears what comes after it)."""
        start = self._take(hypothesis)
        tail = list(hypothesis.words[start:])
        agreed = common_prefix(tail, self._previous_tail) if self._previous_tail else 0
        horizon = hypothesis.ends[-1] - hold if hypothesis.ends else 0.0
        while agreed and hypothesis.ends[start + agreed - 1] > horizon:
            agreed -= 1
        self._previous_tail = tail[agreed:]
        return self._accept(tail[:agreed])

    def finish(self, hypothesis: Hypothesis, hold_unsure: bool = False) -> list[str]:
        """The final hypothesis of an utterance: commit everything not committed yet. With
        `hold_unsure`, all but its unsure last words (Hypothesis.unsure_from), which stay
        tentative: the next hypothesis commits them as `update` does."""
        start = self._take(hypothesis)
        stop = hypothesis.unsure_from(start) if hold_unsure else len(hypothesis.words)
        self._previous_tail = list(hypothesis.words[stop:])
        return self._accept(list(hypothesis.words[start:stop]))

    def force(self, hold: float) -> list[str]:
        """Commit the latest hypothesis up to `hold` seconds before its end, agreed or not
        (the buffer cannot grow any longer)."""
        if self.latest is None or not self.latest.ends:
            return []
        horizon = self.latest.ends[-1] - hold
        count = sum(1 for t in self.latest.ends[self._aligned :] if t <= horizon)
        new = list(self.latest.words[self._aligned : self._aligned + count])
        if self._previous_tail is not None:
            self._previous_tail = self._previous_tail[count:]
        return self._accept(new)

    def cut_point(self, sentences_only: bool) -> tuple[int, float] | None:
        """Where the buffer may be cut: after the last committed word (that ends a sentence),
        as (committed words before the cut, estimated seconds), or None."""
        if self.latest is None:
            return None
        offset = self._aligned - len(self.committed)  # latest's words before the committed
        for index in range(self._aligned - 1, max(offset, 0) - 1, -1):
            if not sentences_only or ends_sentence(self.latest.words[index]):
                return index + 1 - offset, self.latest.ends[index]
        return None

    def drop(self, count: int, seconds: float) -> list[str]:
        """The buffer lost its first `seconds`, holding the first `count` committed words:
        forget them (returned) and time the rest from the new start."""
        gone, self.committed = self.committed[:count], self.committed[count:]
        self._heard = max(0.0, self._heard - seconds)
        self._cut_off = (self._cut_off + gone)[-_ECHO:]
        if self.latest is not None:
            skip = count + self._aligned - len(self.committed) - len(gone)
            self.latest = self.latest.after(max(0, skip), seconds)
            self._aligned = len(self.committed)
        return gone

    def _take(self, hypothesis: Hypothesis) -> int:
        self.latest = hypothesis
        self._aligned = self._align(hypothesis)
        return self._aligned

    def _accept(self, words: list[str]) -> list[str]:
        self.committed.extend(words)
        self._aligned += len(words)
        return words

    def _align(self, hypothesis: Hypothesis) -> int:
        """Where the committed words end in `hypothesis` (after the words it ends within the
        buffer's committed first seconds): their count, unless the decoder has since dropped,
        merged or split a committed word; then where the last two (else the last one)
        committed words sit nearest that count, else where their letters end. With nothing
        committed yet, skip the words the buffer repeats from the text cut off before it."""
        words = list(hypothesis.words)
        skip = next((n for n, end in enumerate(hypothesis.ends) if end > self._heard), len(words))
        k = len(self.committed)
        if k == 0:
            return self._after_cut_off(words, skip)
        for size in (2, 1):
            tail = [normalized(w) for w in self.committed[-size:]]
            for shift in (0, -1, 1, -2, 2, -3, 3):
                end = skip + k + shift
                if (
                    skip + size <= end <= len(words)
                    and [normalized(w) for w in words[end - size : end]] == tail
                ):
                    return end
        return skip + self._by_letters(words[skip:])

    def _by_letters(self, words: list[str]) -> int:
        """Where as many letters as the committed words hold end in `words`: the decoder now
        joins or splits them otherwise ("key words" / "keywords."), or reads them otherwise."""
        target = sum(len(normalized(w)) for w in self.committed)
        total, best, gap = 0, 0, target
        for count, word in enumerate(words, 1):
            total += len(normalized(word))
            if abs(total - target) < gap:
                best, gap = count, abs(total - target)
            if total >= target:
                break
        return best

    def _after_cut_off(self, words: list[str], skip: int) -> int:
        """With nothing committed yet: where the words committed before this buffer end in
        it. Where its last two words are read before the onset, the words after them are
        new, though the decoder ends them before the onset too: speech the voice detector
        missed between two utterances ("... Americans. [ask] not what ..."), which the one
        before did not commit. Else by time, after any words it repeats."""
        last = self._cut_off[-2:]
        if len(last) == 2:
            for end in range(skip, 1, -1):
                if all(map(_alike, words[end - 2 : end], last)):
                    return end
        return skip + self._echo(words[skip:])

    def _echo(self, words: list[str]) -> int:
        for size in range(min(len(self._cut_off), len(words)), 0, -1):
            if [normalized(w) for w in words[:size]] == [
                normalized(w) for w in self._cut_off[-size:]
            ]:
                return size
        return 0
