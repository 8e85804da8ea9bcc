"""The Realtime API's transcription events as kvscribe speaks them: the session's
configuration from either update form, client events read and bounded, live mode's commits
as server events, and `error` events (kvscribe/serve/realtime.py runs the sessions)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvscribe.languages import WHISPER_CODES, language_code
from kvscribe.live.capture import CHUNK_SECONDS

INPUT_RATE = 24_000  # the Realtime API's PCM16: 24 kHz mono, little-endian


class SessionError(Exception):
    """A client mistake: answered with an `error` event, the session goes on."""

    def __init__(self, message: str, code: str, param: str | None = None):
        super().__init__(message)
        self.message, self.code, self.param = message, code, param


def error_event(
    message: str,
    code: str,
    param: str | None = None,
    kind: str = "",
    event_id: str | None = None,
) -> dict:
    """An `error` event as the Realtime API sends it; `event_id`: the client's event that
    caused it."""
    return {
        "type": "error",
        "event_id": new_id("event"),
        "error": {
            "type": kind or "invalid_request_error",
            "code": code,
            "message": message,
            "param": param,
            "event_id": event_id,
        },
    }


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


# -- the session's configuration ------------------------------------------------------------


@dataclass(frozen=True)
class SessionConfig:
    language: str | None = None
    prompt: str | None = None
    beta: bool = True  # answered with transcription_session.* events, else session.*
    # turn_detection server_vad: kvscribe's voice detector ends utterances; null: the
    # client does, with input_audio_buffer.commit (kvscribe.serve.realtime_turns).
    server_vad: bool = True

    def describe(self, model: str) -> dict[str, Any]:
        """The session as the API shows it in `*.created` / `*.updated`."""
        transcription = {"model": model, "language": self.language, "prompt": self.prompt or ""}
        turn = None
        if self.server_vad:
            turn = {"type": "server_vad", "silence_duration_ms": 700, "prefix_padding_ms": 200}
        if self.beta:
            return {
                "id": None,
                "object": "realtime.transcription_session",
                "input_audio_format": "pcm16",
                "input_audio_transcription": transcription,
                "turn_detection": turn,
            }
        audio_format = {"type": "audio/pcm", "rate": INPUT_RATE}
        return {
            "type": "transcription",
            "audio": {
                "input": {
                    "format": audio_format,
                    "transcription": transcription,
                    "turn_detection": turn,
                }
            },
        }


_UNCHANGED = object()  # a field the update leaves out keeps the session's own


def updated_config(
    current: SessionConfig, event: dict, model_names: tuple[str, ...]
) -> SessionConfig:
    """The session after an update event (either form), or SessionError naming the field
    as that form spells it."""
    session = _object(event.get("session"), "session", required=True)
    beta = event["type"] == "transcription_session.update"
    if beta:
        names = _BETA_NAMES
        audio_format = session.get("input_audio_format", "pcm16")
        transcription = _object(session.get("input_audio_transcription"), names["transcription"])
        turn = session.get("turn_detection", _UNCHANGED)
    else:
        names = _GA_NAMES
        if session.get("type", "transcription") != "transcription":
            raise SessionError(
                "kvscribe serves transcription sessions only", "invalid_value", "session.type"
            )
        audio_in = _object(
            _object(session.get("audio"), "session.audio").get("input"), "session.audio.input"
        )
        audio_format = _ga_format(audio_in.get("format"))
        transcription = _object(audio_in.get("transcription"), names["transcription"])
        turn = audio_in.get("turn_detection", _UNCHANGED)
    if audio_format != "pcm16":
        raise SessionError(
            f"input audio format {audio_format!r} is not supported: send PCM16 at 24 kHz",
            "invalid_value",
            names["format"],
        )
    server_vad = _server_vad(turn, current.server_vad, names["turn"])
    model = _text(transcription.get("model"), names["transcription"] + ".model")
    if model is not None and model not in (*model_names, "whisper-1"):
        raise SessionError(
            f"model {model!r} is not loaded here (loaded: {', '.join(model_names)})",
            "model_not_found",
            names["transcription"] + ".model",
        )
    language = _language(transcription, current.language, names["transcription"] + ".language")
    prompt = transcription.get("prompt", _UNCHANGED)
    if prompt is _UNCHANGED:
        prompt = current.prompt
    prompt = _text(prompt, names["transcription"] + ".prompt") or None
    return SessionConfig(language=language, prompt=prompt, beta=beta, server_vad=server_vad)


_BETA_NAMES = {
    "transcription": "input_audio_transcription",
    "format": "input_audio_format",
    "turn": "turn_detection",
}
_GA_NAMES = {
    "transcription": "session.audio.input.transcription",
    "format": "session.audio.input.format",
    "turn": "session.audio.input.turn_detection",
}


def _object(value: object, param: str, required: bool = False) -> dict:
    """A JSON object field (absent or null: empty, unless `required`)."""
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise SessionError(f"{param} must be an object", "invalid_type", param)
    return value


def _text(value: object, param: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise SessionError(f"{param} must be a string or null", "invalid_type", param)
    return value


def _ga_format(value: object) -> str:
    """ "pcm16" for PCM16 at 24 kHz in the GA form ({"type": "audio/pcm", "rate": 24000}), else
    what was asked for, to be named in the error."""
    if value is None:
        return "pcm16"
    if not isinstance(value, dict):
        return str(value)
    ok = value.get("type") == "audio/pcm" and value.get("rate", INPUT_RATE) == INPUT_RATE
    return "pcm16" if ok else str(value)


def _language(transcription: dict, current: str | None, param: str) -> str | None:
    """The language asked for: a code or a name Whisper knows; null clears it (detect)."""
    value = transcription.get("language", _UNCHANGED)
    if value is _UNCHANGED:
        return current
    code = language_code(_text(value, param) or None)
    if code is not None and code not in WHISPER_CODES:
        raise SessionError(
            f"unknown language {value!r}: use a code such as en, fr, es, or null to detect",
            "invalid_value",
            param,
        )
    return code


def _server_vad(turn: object, current: bool, param: str) -> bool:
    """True for server_vad, False for null (the client's commits end turns)."""
    if turn is _UNCHANGED:
        return current
    if turn is None:
        return False
    if isinstance(turn, dict) and turn.get("type") == "server_vad":
        return True
    raise SessionError(
        "turn_detection must be server_vad (kvscribe's voice detector, as `kvscribe mic` "
        "uses it) or null (the client commits each turn)",
        "invalid_value",
        param,
    )


# -- events out -----------------------------------------------------------------------------


class EventsOut:
    """The live session's listener: its commits as the Realtime API's events, handed to
    `send` (thread-safe: it queues them for the socket)."""

    def __init__(self, send: Callable[[dict], None], dropped: Callable[[], float] = float):
        self.send = send
        self.dropped = dropped  # seconds of the session's audio lost so far (a backlog)
        self.item_id: str | None = None
        self.previous_item_id: str | None = None
        self._speaking = False
        self._chunks = 0  # 0.1 s chunks heard: the audio clock, in ms * 100
        self._billed = 0  # chunks an item's usage counted: each chunk in one item's only
        self._sent = ""

    # LiveListener
    def heard(self, level_db: float, speaking: bool) -> None:
        self._chunks += 1
        if speaking and not self._speaking and self.item_id is None:
            self._start_item()
        self._speaking = speaking

    def committed(self, text: str) -> None:
        if self.item_id is None:
            self._start_item()
        delta = text if not self._sent else " " + text
        self._sent += delta
        kind = "conversation.item.input_audio_transcription.delta"
        self.send(self._item_event(kind, delta=delta))

    def tentative(self, text: str) -> None:
        pass  # the API has no event for words that may still change

    def utterance_done(self, text: str, latency: float) -> None:
        if self.item_id is None:
            self._start_item()
        ms = self._chunks * int(CHUNK_SECONDS * 1000)
        self.send(self._item_event("input_audio_buffer.speech_stopped", audio_end_ms=ms))
        committed = self._item_event("input_audio_buffer.committed")
        committed["previous_item_id"] = self.previous_item_id
        self.send(committed)
        self.send(
            self._item_event(
                "conversation.item.input_audio_transcription.completed",
                transcript=text,
                usage={"type": "duration", "seconds": self._item_seconds()},
                kvscribe={
                    "latency_seconds": round(latency, 3),
                    "dropped_audio_seconds": round(self.dropped(), 1),
                },
            )
        )
        self.previous_item_id, self.item_id, self._sent = self.item_id, None, ""

    def _item_seconds(self) -> float:
        """The audio this item's usage counts: what came since the last item ended (the
        session's audio is counted once, over its items)."""
        chunks, self._billed = self._chunks - self._billed, self._chunks
        return round(chunks * CHUNK_SECONDS, 1)

    def _start_item(self) -> None:
        self.item_id = new_id("item")
        ms = self._chunks * int(CHUNK_SECONDS * 1000)
        self.send(self._item_event("input_audio_buffer.speech_started", audio_start_ms=ms))

    def _item_event(self, kind: str, **fields: Any) -> dict:
        event = {"type": kind, "event_id": new_id("event"), "item_id": self.item_id}
        if kind.startswith("conversation.item."):
            event["content_index"] = 0
        return event | fields


def parse(message: str | bytes, limit: int) -> dict:
    """One client event, or SessionError."""
    if len(message) > limit:
        raise SessionError(
            f"a message of {len(message)} bytes is over the limit of {limit}: send audio in "
            "smaller appends",
            "message_too_large",
        )
    try:
        event = json.loads(message)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SessionError("the message is not JSON", "invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise SessionError("an event needs a string 'type'", "invalid_value", "type")
    return event
