"""A realtime session whose client ends its turns (`turn_detection: null`): its audio is
held until `input_audio_buffer.commit`, then transcribed whole as a file request is (on the
server's lanes, in shared batches, any length), its segments sent as deltas as they are
decoded and the whole text as `.completed`. `input_audio_buffer.clear` drops what is held.
Sessions with server VAD are kvscribe.serve.realtime's LiveSession path."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.contract import DecodeRequest
from kvscribe.serve.api_errors import ApiError
from kvscribe.serve.realtime_protocol import SessionError, new_id
from kvscribe.serve.scheduler import Decoded, Failed, Finished, Job, Scheduler

# The API refuses a commit of less than this much audio.
MIN_COMMIT_SECONDS = 0.1
_ITEM = "conversation.item.input_audio_transcription"


class ClientTurns:
    """The held audio (16 kHz, resampled as it arrives) and the turns committed from it."""

    def __init__(
        self,
        scheduler: Scheduler,
        request: DecodeRequest,
        send: Callable[[dict], None],
        held_seconds: float,
    ):
        self.scheduler, self.request, self.send = scheduler, request, send
        self.held_seconds = held_seconds  # the most audio one turn may hold
        self._pieces: list[np.ndarray] = []
        self._held = 0  # samples held
        self._previous: str | None = None  # the last committed item
        self._jobs: set[Job] = set()
        self._lock = threading.Lock()  # _jobs: the socket's thread and the lanes'

    def hold(self, samples: np.ndarray) -> None:
        if (self._held + samples.size) / SAMPLE_RATE > self.held_seconds:
            raise SessionError(
                f"the uncommitted audio would pass {self.held_seconds:g} s: commit it "
                "(input_audio_buffer.commit) before sending more",
                "input_audio_buffer_full",
                "audio",
            )
        self._pieces.append(samples)
        self._held += samples.size

    def clear(self) -> None:
        self._pieces, self._held = [], 0
        self.send({"type": "input_audio_buffer.cleared", "event_id": new_id("event")})

    def commit(self) -> None:
        """The held audio becomes an item, transcribed as a file request is."""
        if self._held < MIN_COMMIT_SECONDS * SAMPLE_RATE:
            raise SessionError(
                f"the buffer holds {self._held / SAMPLE_RATE * 1000:.0f} ms of audio; a "
                f"commit needs at least {MIN_COMMIT_SECONDS * 1000:.0f} ms",
                "input_audio_buffer_commit_empty",
            )
        audio = np.concatenate(self._pieces)
        self._pieces, self._held = [], 0
        item_id = new_id("item")
        committed = {"type": "input_audio_buffer.committed", "event_id": new_id("event")}
        self.send(committed | {"item_id": item_id, "previous_item_id": self._previous})
        self._previous = item_id
        turn = _Turn(item_id, audio.size / SAMPLE_RATE, self)
        job = turn.job = Job(audio, self.request, turn.event)
        with self._lock:
            self._jobs.add(job)
        try:
            self.scheduler.submit(job)
        except ApiError as exc:  # a full queue (429) or a server going down (503)
            self.finished(job)
            self.send(_failed(item_id, exc.message, exc.code or "server_error"))

    def finished(self, job: Job) -> None:
        with self._lock:
            self._jobs.discard(job)

    def abandon(self) -> None:
        """The client went: its turns still waiting or decoding are cancelled."""
        with self._lock:
            jobs, self._jobs = list(self._jobs), set()
        for job in jobs:
            self.scheduler.cancel(job)


class _Turn:
    """One committed turn's scheduler events as the API's item events (on a lane's thread)."""

    def __init__(self, item_id: str, seconds: float, turns: ClientTurns):
        self.item_id, self.seconds, self.turns = item_id, seconds, turns
        self.committed_at = time.perf_counter()
        self.segments: list[str] = []
        self.sent = ""
        self.job: Job | None = None

    def event(self, event) -> None:
        send = self.turns.send
        if isinstance(event, Decoded):
            self.segments.append(event.segment.text)
            so_far = "".join(self.segments).strip()
            if len(so_far) > len(self.sent):
                send(self._item("delta", delta=so_far[len(self.sent) :]))
                self.sent = so_far
        elif isinstance(event, Finished):
            latency = time.perf_counter() - self.committed_at
            usage = {"type": "duration", "seconds": round(self.seconds, 1)}
            kvscribe = {"latency_seconds": round(latency, 3), "dropped_audio_seconds": 0.0}
            send(self._item("completed", transcript=self.sent, usage=usage, kvscribe=kvscribe))
        elif isinstance(event, Failed):
            send(_failed(self.item_id, event.error.message, event.error.code or "server_error"))
        if isinstance(event, Finished | Failed) and self.job is not None:
            self.turns.finished(self.job)

    def _item(self, suffix: str, **fields) -> dict:
        event = {"type": f"{_ITEM}.{suffix}", "event_id": new_id("event")}
        return event | {"item_id": self.item_id, "content_index": 0} | fields


def _failed(item_id: str, message: str, code: str) -> dict:
    error = {"type": "transcription_error", "code": code, "message": message, "param": None}
    event = {"type": f"{_ITEM}.failed", "event_id": new_id("event"), "item_id": item_id}
    return event | {"content_index": 0, "error": error}
