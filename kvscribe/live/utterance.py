"""One utterance of a live session (kvscribe/live/session.py): where its buffer starts and its
speech began, its pauses, what is committed of it, and the cuts its buffer may take."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from kvscribe.audio import SAMPLE_RATE
from kvscribe.live.agreement import LocalAgreement


@dataclass(frozen=True)
class _HeldState:
    end: int  # stream sample where the held utterance's speech had stopped
    onset: int  # where the speech that resumed it began
    agreement: LocalAgreement  # a copy of its agreement at the held end
    decoded_to: int


@dataclass
class Utterance:
    start: int  # stream sample where the buffer starts (moves forward when it is cut)
    onset: int  # stream sample where its speech began
    agreement: LocalAgreement = field(default_factory=LocalAgreement)
    words: list[str] = field(default_factory=list)  # everything committed in this utterance
    decoded_to: int = 0  # stream sample up to which the latest hypothesis heard
    paused_at: int | None = None  # speech went quiet here and has not resumed
    pauses: list[tuple[int, int]] = field(default_factory=list)  # quiet stretches inside it
    settled_at: float | None = None  # perf_counter() of a commit of all heard, until speech resumes
    # Stream sample where it ended with its unsure last words uncommitted, waiting
    # `hold_unsure` for speech that continues it (None: not ended).
    held_since: int | None = None
    # Where speech resumed it after a held end, and its state then: a blip the voice
    # detector discards as too short to be speech puts it back (`unresume`).
    resumed: _HeldState | None = None
    # Stream samples where its buffer may start without splitting a word: its start, its
    # onset's pad, the middles of its pauses (the next utterance's context starts at one).
    starts: list[int] = field(default_factory=list)

    def resume(self, sample: int) -> None:
        """Speech resumed at stream sample `sample` after the utterance's pause."""
        if self.paused_at is not None:
            self.pauses.append((self.paused_at, sample))
            del self.pauses[:-64]  # the recent ones are all a cut can use
            self.starts.append((self.paused_at + sample) // 2)
            del self.starts[:-64]
        self.paused_at = None
        self.settled_at = None

    def resume_held(self, onset: int) -> None:
        """Speech began at stream sample `onset` while its end was held: it goes on."""
        assert self.held_since is not None
        kept = copy.deepcopy(self.agreement)
        self.resumed = _HeldState(self.held_since, onset, kept, self.decoded_to)
        self.held_since = None
        self.resume(onset)

    def too_new_to_commit(self, blip: int, received: int) -> bool:
        """Speech resumed after a held end, and what came of it (to its pause, else to the
        `received` stream sample) is shorter than `blip` samples, what the voice detector
        may still discard as too short to be speech: commit nothing, cut nothing, until it
        is longer (`unresume` could not take back a commit)."""
        resumed = self.resumed
        if resumed is None:
            return False
        until = self.paused_at if self.paused_at is not None else received
        return until - resumed.onset < blip

    def unresume(self) -> None:
        """The speech that resumed it was a blip: held and paused again, as before it (its
        end was where its pause began), whatever was decoded meanwhile forgotten."""
        assert self.resumed is not None
        held = self.resumed
        self.held_since = self.paused_at = held.end
        self.agreement, self.decoded_to, self.resumed = held.agreement, held.decoded_to, None

    def move_start(self, count: int, cut: int) -> None:
        """Cut the buffer at stream sample `cut`, before which it holds `count` committed words
        of its own."""
        self.agreement.drop(count, (cut - self.start) / SAMPLE_RATE)
        self.starts = [cut] + [p for p in self.starts if p > cut]
        self.start = cut
        self.decoded_to = cut  # the latest hypothesis no longer describes this buffer

    def snap_to_pause(self, sample: int) -> int | None:
        """The middle of the voice detector's pause nearest `sample` (within 0.5 s), if any:
        cutting there cannot split a word."""
        reach = int(0.5 * SAMPLE_RATE)
        near = [(a, b) for a, b in self.pauses if a - reach <= sample <= b + reach]
        if not near:
            return None
        a, b = min(near, key=lambda p: abs((p[0] + p[1]) // 2 - sample))
        return max(self.start, (a + b) // 2)
