"""Realtime transcription sessions over a WebSocket (`/v1/realtime?intent=transcription`), as
OpenAI's Realtime API defines them, decoded by live mode's session (kvscribe.live.session).

A client configures the session (`transcription_session.update`, or `session.update` with a
session of type "transcription"), appends base64 PCM16 audio at 24 kHz
(`input_audio_buffer.append`) and receives, per utterance the voice detector finds
(server VAD), `input_audio_buffer.speech_started`, then
`conversation.item.input_audio_transcription.delta` as live mode commits words, then
`input_audio_buffer.speech_stopped`, `input_audio_buffer.committed` and
`conversation.item.input_audio_transcription.completed` with the utterance's whole text:
the deltas joined are that text. Errors come as `error` events and the session stays open.

Each decode of a session's buffer is a job on the server's lanes (kvscribe.serve.scheduler),
decoded one row as `kvscribe mic` decodes it, so sessions and file requests share the lanes
and the KV budget. A session holds no decoder cache between its decodes (live mode builds one
per decode); its audio is bounded (`SessionLimits`), and a client that goes takes its
session with it: the waiting decode is cancelled, the threads end.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvscribe import setting_rows as row
from kvscribe.contract import DecodeRequest, DecoderReport, Transcription
from kvscribe.live.capture import Capture
from kvscribe.live.stats import LiveStats
from kvscribe.live.streaming import StreamSettings
from kvscribe.serve.api_errors import ApiError
from kvscribe.serve.realtime_audio import SocketAudio
from kvscribe.serve.realtime_protocol import (
    INPUT_RATE,
    EventsOut,
    SessionConfig,
    SessionError,
    error_event,
)
from kvscribe.serve.realtime_turns import ClientTurns
from kvscribe.serve.scheduler import Decoded, Failed, Finished, Job, Scheduler, Started

LIVE_MIN_SILENCE = 0.7  # `kvscribe mic`'s end of an utterance (LiveOptions.min_silence)
# A client's commit: this much quiet after its audio ends the utterance it holds.
COMMIT_QUIET_SECONDS = LIVE_MIN_SILENCE + 0.3


@dataclass(frozen=True)
class SessionLimits:
    audio_seconds: float = 3600.0  # of audio a session may send in all
    message_bytes: int = 1 << 20  # one WebSocket message (about 8 s of base64 PCM16)
    backlog_seconds: float = 30.0  # audio waiting to be heard; older audio is dropped
    turn_seconds: float = 600.0  # audio held for one turn the client commits itself
    open_at_once: int = 64  # sessions the server holds open (--max-sessions); more: 429


class SessionClosed(Exception):
    """The client went: the session's decodes stop."""


# -- decoding on the server's lanes ----------------------------------------------------------


class LaneEngine:
    """What a live session decodes with on the server: each decode a job on the scheduler's
    lanes, decoded one row as `kvscribe mic` decodes (Job.live), never shared."""

    def __init__(self, scheduler: Scheduler, decoded: Callable[[DecoderReport], None]):
        self.scheduler = scheduler
        self.decoded = decoded  # each decode's report, for the server's figures
        self.closed = threading.Event()
        self._job: Job | None = None

    def transcribe(self, samples: np.ndarray, request: DecodeRequest) -> Transcription:
        if self.closed.is_set():
            raise SessionClosed
        events: list = []
        done = threading.Event()

        def sink(event) -> None:  # on a lane's thread
            events.append(event)
            if isinstance(event, Finished | Failed):
                done.set()

        self._job = Job(np.ascontiguousarray(samples), request, sink, live=True)
        self._submit(self._job)
        while not done.wait(0.1):
            if self.closed.is_set():
                self.scheduler.cancel(self._job)
                raise SessionClosed
        try:
            transcription = _transcription(events)
        finally:
            # A raised error would hold this frame, and through it the session's audio, in
            # a cycle only a full collection frees (about 225 MB a failed session).
            events.clear()
        self.decoded(transcription.report)
        return transcription

    def unhonoured(self, request: DecodeRequest, seconds: float) -> list[str]:
        return self.scheduler.backend.unhonoured(request, seconds)

    def _submit(self, job: Job) -> None:
        """Queue the decode; a full queue is waited out (the audio goes on arriving, and a
        backlog past SessionLimits.backlog_seconds is dropped and counted); a server
        shutting down ends the session (ApiError 503)."""
        while True:
            try:
                self.scheduler.submit(job)
                return
            except ApiError as exc:
                if exc.status != 429:
                    raise
                if self.closed.wait(min(exc.retry_after or 1, 2)):
                    raise SessionClosed from None

    def close(self) -> None:
        self.closed.set()


def _transcription(events: list) -> Transcription:
    failed = next((e for e in events if isinstance(e, Failed)), None)
    if failed is not None:
        error = failed.error
        del failed
        try:
            raise error
        finally:
            del error  # nor may this frame hold it (the same cycle)
    started = next(e for e in events if isinstance(e, Started))
    finished = next(e for e in events if isinstance(e, Finished))
    segments = [e.segment for e in events if isinstance(e, Decoded)]
    return Transcription(started.language, started.probability, iter(segments), finished.report)


# -- one session ----------------------------------------------------------------------------


class RealtimeSession:
    """One client's session: its audio source, its live session on a thread of its own,
    and its decodes on the server's lanes."""

    def __init__(
        self,
        scheduler: Scheduler,
        base_request: DecodeRequest,
        stats: LiveStats,
        send: Callable[[dict], None],
        limits: SessionLimits,
        decoded: Callable[[DecoderReport], None] = lambda report: None,
    ):
        self.scheduler, self.base_request, self.stats = scheduler, base_request, stats
        self.send, self.limits = send, limits
        self.audio = SocketAudio()
        self.engine = LaneEngine(scheduler, decoded)
        self.config = SessionConfig()
        self._thread: threading.Thread | None = None  # server VAD: the live session's
        self._session = None
        self._turns: ClientTurns | None = None  # turn_detection null: the client's turns
        self._uncommitted = 0  # bytes of audio appended since the last commit (server VAD)
        self.ended: str | None = None  # why the session's decoding ended (an engine error)

    def _check_not_ended(self) -> None:
        """Audio for a session that can no longer decode is refused, not kept unread."""
        if self.ended is not None:
            raise SessionError(
                f"the session's decoding has ended ({self.ended}): start a new session",
                "session_ended",
            )

    def configure(self, config: SessionConfig) -> None:
        if self._thread is not None or self._turns is not None:
            for name in ("language", "prompt"):  # the session's decodes were set up with them
                if getattr(config, name) != getattr(self.config, name):
                    raise SessionError(
                        f"the {name} is fixed once audio has come: start a new session",
                        "invalid_value",
                        name,
                    )
            if config.server_vad != self.config.server_vad:
                raise SessionError(
                    "turn detection is fixed once audio has come",
                    "invalid_value",
                    "turn_detection",
                )
        self.config = config

    def append(self, event: dict) -> None:
        self._check_not_ended()
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise SessionError("audio must be a string of base64 PCM16", "invalid_value", "audio")
        try:
            pcm = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise SessionError("audio is not base64", "invalid_value", "audio") from None
        self._uncommitted += len(pcm)
        if self.audio.seconds + len(pcm) / 2 / INPUT_RATE > self.limits.audio_seconds:
            raise SessionError(
                f"the session's audio would pass {self.limits.audio_seconds:g} s: start a "
                "new session",
                "session_audio_limit",
                "audio",
            )
        if not self.config.server_vad:
            self._client_turns().hold(self.audio.convert(pcm))
            return
        if self._thread is None:
            self._start()
        self.audio.append(pcm)

    def commit(self) -> None:
        """The client says the speaker is done. With server VAD the session hears the quiet
        that ends an utterance (kvscribe's voice detector still decides where speech was);
        without, the audio held since the last commit is transcribed whole."""
        self._check_not_ended()
        if not self.config.server_vad:
            self._client_turns().commit()
            return
        held, self._uncommitted = self._uncommitted, 0
        if self._thread is None or held < 2 * INPUT_RATE // 10:  # under 100 ms since the last
            raise SessionError(
                f"{held / 2 / INPUT_RATE * 1000:.0f} ms of audio since the last commit: a "
                "commit needs at least 100 ms",
                "input_audio_buffer_commit_empty",
            )
        quiet = int(COMMIT_QUIET_SECONDS * INPUT_RATE)
        self.audio.append(bytes(2 * quiet))

    def clear(self) -> None:
        if self.config.server_vad:
            raise SessionError(
                "with server VAD the voice detector decides what is heard, and clears "
                "nothing: set turn_detection null to hold and clear audio yourself",
                "invalid_value",
                "type",
            )
        self._client_turns().clear()

    def _request(self, words: bool) -> DecodeRequest:
        return dataclasses.replace(
            self.base_request,
            task="transcribe",
            language=self.config.language or self.base_request.language,
            prompt=self.config.prompt,
            word_timestamps=words,
        )

    def _client_turns(self) -> ClientTurns:
        if self._turns is None:
            request = self._request(words=False)  # the API's item events carry no times
            self._turns = ClientTurns(self.scheduler, request, self.send, self.limits.turn_seconds)
        return self._turns

    def _start(self) -> None:
        from kvscribe.live.session import LiveSession
        from kvscribe.voice.silero import SileroVad, VadSettings, VoiceDetector

        vad = VadSettings(min_silence=LIVE_MIN_SILENCE)
        # An item completes once the silence that ends it has arrived, as the API's server
        # VAD completes one: no wait for more speech after unsure last words (a client may
        # send no more audio until it hears the item is done).
        settings = StreamSettings(hold_unsure=0.0, vad=vad)
        # Commits and buffer cuts fall at the words' real ends.
        request = self._request(words=True)
        self.stats.settings[row.STREAMING] = settings.describe()
        capture = Capture(self.audio, backlog=self.limits.backlog_seconds)
        self._session = LiveSession(
            self.engine,
            request,
            capture,
            VoiceDetector(SileroVad(), vad),
            EventsOut(self.send, lambda: capture.dropped_seconds),
            self.stats,
            settings,
        )
        self._thread = threading.Thread(target=self._run, name="kvscribe-realtime", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._session is not None
        try:
            self._session.run()
        except SessionClosed:
            return
        except ApiError as exc:
            body = exc.body()["error"]  # a 400 (a language the model lacks) is the client's
            self._end(error_event(exc.message, exc.code or "server_error", exc.param, body["type"]))
        except Exception as exc:  # the engine failed: say so, end the session's decoding
            message = f"the engine failed: {type(exc).__name__}: {exc}"
            self._end(error_event(message, "engine_error", kind="server_error"))

    def _end(self, error: dict) -> None:
        """The session's decoding stopped: the error is sent, later audio refused and what
        it held let go."""
        self.ended = error["error"]["message"]
        self.audio.end()
        self.send(error)

    def finish(self, timeout: float) -> bool:
        """The client ended its audio: decode what is pending; True once done."""
        if self._thread is None:
            return True
        self.audio.end()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def abandon(self) -> None:
        """The client went: stop decoding at once and let go of everything."""
        self.engine.close()
        if self._turns is not None:
            self._turns.abandon()
        if self._session is not None:
            self._session.stop()
        self.audio.end()
        if self._thread is not None:
            self._thread.join(5.0)
