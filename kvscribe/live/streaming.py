"""What a live session is told and whom it tells: its streaming policy (when to re-decode,
commit, cut and carry context; docs/live.md, "How it works") and its listener."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Protocol

from kvscribe.contract import DecodeRequest
from kvscribe.voice.silero import VadSettings

# A decode may emit this many tokens per second of buffer (and _TOKENS_BASE more): twice fast
# speech's rate. A decoder stuck repeating itself ("pre-p-p-p...") otherwise runs to Whisper's
# 224 tokens at every temperature of the fallback, seconds the stream waits.
_TOKENS_PER_SECOND = 12
_TOKENS_BASE = 16


@dataclass(frozen=True)
class StreamSettings:
    step: float = 1.0  # seconds of new audio between re-decodes of an utterance
    # Quiet this long: commit what the decoder heard, not waiting for the utterance's end (the
    # commit latency a speaker sees); the end (vad.min_silence) stays later, so speech that
    # resumes after a short pause continues the same buffer.
    commit_silence: float = 0.3
    # Quiet heard before the decode at a pause: the buffer then ends this far past the
    # voice detector's pause (plus the rest of its 0.1 s chunk), and the commit waits this
    # long (docs/live.md, "Decoding at a pause sooner").
    pause_heard: float = 0.05
    hold: float = 2.0  # words are committed once the decoder has heard this much speech after
    min_context: float = 5.0  # and not before the buffer holds this much audio
    # Whisper reads better with more context: cut the buffer late (it sees 30 s at most).
    trim_after: float = 18.0  # a longer buffer is cut after its last committed sentence
    max_buffer: float = 27.0  # a buffer this long is cut wherever it must
    # A new utterance's buffer starts with the audio of the ones before it, up to this many
    # seconds before its onset (their words already committed): Whisper reads a short phrase
    # poorly alone, and a file run reads it beside its neighbours. 0: each one alone. More
    # than 4 s reaches across a change of speaker more often, and the other voice misleads
    # the decoder ("so my fellow" read "so am I fellow"): docs/live.md, "Context".
    context: float = 4.0
    alone_after: float = 6.0  # an utterance this long reads well alone: the context goes
    # An utterance's unsure last words (agreement.UNSURE_PROBABILITY) wait this long after its
    # speech stopped for speech that continues it, to be read again with that speech (a
    # pause between phrases: JFK's after "ask not" is 1.1 s); then they are committed as
    # read. 0: commit them at once.
    hold_unsure: float = 2.0
    vad: VadSettings = field(default_factory=VadSettings)

    @property
    def commit_after(self) -> float:
        """Seconds of quiet that commit: never later than the end of the utterance."""
        return min(self.commit_silence, self.vad.min_silence)

    def describe(self) -> str:
        """The stats' streaming row."""
        return (
            f"re-decode every {self.step:g} s; commit after {self.commit_after:g} s of silence, "
            f"end after {self.vad.min_silence:g} s; "
            + (f"decoded with {self.context:g} s before it" if self.context else "each alone")
            + (
                f"; unsure last words wait {self.hold_unsure:g} s for more speech"
                if self.hold_unsure
                else ""
            )
        )


def decode_request(request: DecodeRequest, seconds: float) -> DecodeRequest:
    """The request for one decode of a buffer of `seconds`: its tokens bounded by the
    buffer's length (the user's --max-new-tokens when smaller), and no stretch of skipped
    speech read again inside the decode (DecodeRequest.reread_stretched): the next decode
    of the buffer reads it anyway."""
    bound = int(seconds * _TOKENS_PER_SECOND) + _TOKENS_BASE
    given = request.max_new_tokens
    tokens = given if given is not None and given <= bound else bound
    return dataclasses.replace(request, max_new_tokens=tokens, reread_stretched=False)


class LiveListener(Protocol):
    def committed(self, text: str) -> None:
        """Words just committed, continuing the current utterance."""

    def tentative(self, text: str) -> None:
        """The uncommitted tail of the latest hypothesis ('' when none)."""

    def utterance_done(self, text: str, latency: float) -> None:
        """The utterance's whole committed text, `latency` s after its speech ended."""

    def heard(self, level_db: float, speaking: bool) -> None:
        """One chunk arrived (for level meters)."""
