"""Realtime transcription sessions over a WebSocket (kvscribe/serve/realtime.py): the real
`openai` client's realtime connection against a real `kvscribe serve` on 127.0.0.1, audio
sent at the pace it was spoken; the session's parts on their own."""

from __future__ import annotations

import base64
import json
import queue
import threading
import time
import urllib.request

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.serve.realtime_protocol import (
    INPUT_RATE,
)
from tests.conftest import SAMPLE, SAMPLE_TEXT, wer
from tests.serving import KEY, Served, settled, transcribe

openai = pytest.importorskip("openai")
pytest.importorskip("websockets")
pytest.importorskip("starlette")

# As `kvscribe mic` against a file run (tests/test_live_cli.py): one word of JFK's 22.
MAX_WER_GAP = 0.05
EVENTS_WAIT = 90  # seconds a test waits for the server's events after its audio, at most
CHUNK = INPUT_RATE // 10  # 0.1 s of PCM16 per append


def _pcm24(samples16: np.ndarray, silence: float = 0.0) -> bytes:
    """16 kHz float samples as the API's PCM16 at 24 kHz, then `silence` seconds of quiet."""
    wanted = round(samples16.size * INPUT_RATE / SAMPLE_RATE)
    resampled = np.interp(
        np.linspace(0, samples16.size - 1, wanted), np.arange(samples16.size), samples16
    )
    quiet = np.zeros(int(silence * INPUT_RATE))
    return (np.clip(np.concatenate([resampled, quiet]), -1, 1) * 32767).astype("<i2").tobytes()


def _append(pcm: bytes) -> dict:
    return {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}


def _connect(server: Served, key: str = KEY):
    return server.client(key=key).realtime.connect(
        model="whisper-1", extra_query={"intent": "transcription"}
    )


def _stream(connection, pcm: bytes, paced: bool = True) -> threading.Thread:
    """Send `pcm` 0.1 s at a time, each when its time comes, from a thread."""

    def send() -> None:
        started = time.monotonic()
        for n, at in enumerate(range(0, len(pcm), 2 * CHUNK)):
            if paced:
                time.sleep(max(0.0, started + n * 0.1 - time.monotonic()))
            connection.send(_append(pcm[at : at + 2 * CHUNK]))

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


class _Events:
    """A connection's server events, received on a thread of their own, so that waiting
    for them is bounded: a server that sends nothing more cannot hold the test."""

    def __init__(self, connection):
        self._arrived: queue.Queue = queue.Queue()
        self._connection = connection
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        while True:
            try:
                self._arrived.put(self._connection.recv())
            except Exception:  # the socket closed (the test is done with it)
                self._arrived.put(None)
                return

    def until(self, done, seconds: float = EVENTS_WAIT) -> list:
        """The events from now until `done(events)` or `seconds` pass."""
        events: list = []
        deadline = time.monotonic() + seconds
        while not done(events):
            try:
                event = self._arrived.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if event is None:
                break
            events.append(event)
        return events


# -- a whole session, against the server's own file transcription ------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = Served(tmp_path_factory.mktemp("realtime"))
    yield served
    assert served.stop() == 0
    assert "Traceback" not in served.log  # no client's mistake is the server's


@pytest.fixture(scope="module")
def offline(server) -> str:
    """The server's file transcription of the sample, asked once: what a session's text is
    held against (the same request in each test that reads it)."""
    return transcribe(server.client(), SAMPLE).text


@pytest.mark.model
@pytest.mark.slow
def test_a_session_streamed_in_real_time_commits_what_a_file_request_transcribes(server, offline):
    pcm = _pcm24(load_audio(SAMPLE), silence=1.5)  # the last utterance ends in the quiet
    with _connect(server) as connection:
        created = connection.recv()  # the GA client: the GA event its types know
        assert created.type == "session.created" and created.session.type == "transcription"
        connection.send(
            {
                "type": "transcription_session.update",
                "session": {"input_audio_transcription": {"model": "whisper-1"}},
            }
        )
        sender = _stream(connection, pcm)
        sender.join()
        # JFK speaks until about 10.6 s: the last utterance ends past 10 s.
        events = _Events(connection).until(lambda got: _speech_all_done(got, 10_000))
    kinds = [e.type for e in events]
    assert kinds[0] == "transcription_session.updated", kinds
    items = _by_item(events)
    assert items, kinds
    completed = []
    for item_id, item in items.items():
        types = [e.type for e in item]
        assert types[0] == "input_audio_buffer.speech_started", types
        assert types[-3:] == [
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "conversation.item.input_audio_transcription.completed",
        ], types
        deltas = "".join(e.delta for e in item if e.type.endswith(".delta"))
        assert deltas == item[-1].transcript, item_id  # the deltas joined are the text
        completed.append(item[-1].transcript)
    heard = " ".join(completed)
    assert wer(SAMPLE_TEXT, heard) <= wer(SAMPLE_TEXT, offline) + MAX_WER_GAP, heard
    # Each item names the one before it, in order.
    committed = [e for e in events if e.type == "input_audio_buffer.committed"]
    assert [c.previous_item_id for c in committed] == [None, *list(items)[:-1]]
    figures = settled(server)
    assert figures["kvscribe_realtime_sessions"] == 0  # the closed session is gone
    assert figures["kvscribe_kv_reserved_bytes"] == 0


def _speech_all_done(events: list, heard_ms: int = 0) -> bool:
    """Every utterance begun is complete, the last one ending `heard_ms` or later into the
    audio sent (the server's audio clock)."""
    started = sum(e.type == "input_audio_buffer.speech_started" for e in events)
    completed = sum(e.type.endswith("transcription.completed") for e in events)
    ends = [e.audio_end_ms for e in events if e.type == "input_audio_buffer.speech_stopped"]
    return started > 0 and started == completed and bool(ends) and ends[-1] >= heard_ms


def _by_item(events: list) -> dict[str, list]:
    items: dict[str, list] = {}
    for event in events:
        item_id = getattr(event, "item_id", None)
        if item_id is not None:
            items.setdefault(item_id, []).append(event)
    return items


@pytest.mark.model
@pytest.mark.slow
def test_a_client_commit_ends_the_utterance_and_mistakes_get_error_events(server):
    pcm = _pcm24(load_audio(SAMPLE)[: 3 * SAMPLE_RATE])  # "And so my fellow Americans"
    with _connect(server) as connection:
        assert connection.recv().type == "session.created"
        mistakes = [
            {"type": "input_audio_buffer.commit"},  # nothing to commit yet
            {
                "type": "transcription_session.update",
                "session": {"turn_detection": {"type": "semantic_vad"}},
            },
            {
                "type": "session.update",
                "session": {
                    "type": "transcription",
                    "audio": {"input": {"format": {"type": "audio/pcmu"}}},
                },
            },
            {"type": "input_audio_buffer.append", "audio": "not base64!"},
            {"type": "response.create"},
        ]
        for mistake in mistakes:
            connection.send(mistake)
        received = _Events(connection)
        errors = received.until(lambda got: len(got) == len(mistakes))
        assert [e.type for e in errors] == ["error"] * len(mistakes)
        codes = [e.error.code for e in errors]
        assert codes == [
            "input_audio_buffer_commit_empty",
            "invalid_value",
            "invalid_value",
            "invalid_value",
            "invalid_value",
        ]
        assert errors[1].error.param == "turn_detection" and errors[3].error.param == "audio"
        # The session is still open: audio, then the client's commit, ends an utterance.
        _stream(connection, pcm, paced=False).join()
        connection.send({"type": "input_audio_buffer.commit"})
        events = received.until(_speech_all_done)
    completed = [e.transcript for e in events if e.type.endswith("transcription.completed")]
    assert completed and "fellow" in " ".join(completed).lower(), [e.type for e in events]


@pytest.mark.model
@pytest.mark.slow
def test_with_turn_detection_null_each_commit_is_transcribed_whole(server, offline):
    samples = load_audio(SAMPLE)
    manual = {"type": "transcription_session.update", "session": {"turn_detection": None}}
    with _connect(server) as connection:
        assert connection.recv().type == "session.created"
        received = _Events(connection)
        connection.send(manual)
        updated = received.until(lambda got: len(got) == 1)
        assert updated[0].type == "transcription_session.updated", updated
        assert updated[0].session["turn_detection"] is None
        # Held audio that is cleared is gone: a commit then has nothing to commit.
        _stream(connection, _pcm24(samples[:SAMPLE_RATE]), paced=False).join()
        connection.send({"type": "input_audio_buffer.clear"})
        connection.send({"type": "input_audio_buffer.commit"})
        cleared = received.until(lambda got: len(got) == 2)
        assert [e.type for e in cleared] == ["input_audio_buffer.cleared", "error"], cleared
        assert cleared[1].error.code == "input_audio_buffer_commit_empty"
        # Two turns, the whole speech and then its first words again, each its own item.
        for turn in (samples, samples[: 3 * SAMPLE_RATE]):
            _stream(connection, _pcm24(turn), paced=False).join()
            connection.send({"type": "input_audio_buffer.commit"})
        connection.send({**manual, "session": {"turn_detection": {"type": "server_vad"}}})
        events = received.until(
            lambda got: sum(e.type.endswith("transcription.completed") for e in got) == 2
        )
    errors = [e for e in events if e.type == "error"]
    assert [e.error.param for e in errors] == ["turn_detection"]  # fixed once audio came
    items = _by_item(events)
    assert len(items) == 2, [e.type for e in events]
    committed = [e for e in events if e.type == "input_audio_buffer.committed"]
    assert [c.previous_item_id for c in committed] == [None, committed[0].item_id]
    texts = []
    for item in items.values():
        assert item[0].type == "input_audio_buffer.committed"
        assert item[-1].type == "conversation.item.input_audio_transcription.completed"
        deltas = "".join(e.delta for e in item if e.type.endswith(".delta"))
        assert deltas == item[-1].transcript
        texts.append(item[-1].transcript)
    assert wer(SAMPLE_TEXT, texts[0]) <= wer(SAMPLE_TEXT, offline) + MAX_WER_GAP, texts[0]
    assert "fellow" in texts[1].lower() and "country" not in texts[1].lower(), texts[1]
    assert settled(server)["kvscribe_kv_reserved_bytes"] == 0


@pytest.mark.model
@pytest.mark.slow
def test_a_key_is_asked_for_and_a_client_that_goes_frees_its_session(server):
    with pytest.raises(Exception) as refused, _connect(server, key="wrong") as connection:
        connection.recv()  # not reached: the handshake is refused, no session
    assert "401" in str(refused.value)  # as the HTTP routes answer (it was a bare 403)
    # A browser offers subprotocols and refuses a handshake that picks none of them: with
    # the key in a header (or no key needed) none was picked, so the page could not record.
    from websockets.sync.client import connect

    url = server.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    for offered, chosen in (
        (["realtime"], "realtime"),
        (["realtime", f"openai-insecure-api-key.{KEY}"], f"openai-insecure-api-key.{KEY}"),
    ):
        with connect(url, subprotocols=offered, additional_headers=server.auth()) as socket:
            assert socket.subprotocol == chosen
    # The beta client says so in a header, and is greeted in its own form.
    beta = {**server.auth(), "OpenAI-Beta": "realtime=v1"}
    with connect(url, additional_headers=beta) as socket:
        assert json.loads(socket.recv(timeout=30))["type"] == "transcription_session.created"
    pcm = _pcm24(load_audio(SAMPLE))
    with _connect(server) as connection:
        assert connection.recv().type == "session.created"
        _stream(connection, pcm[: len(pcm) // 2], paced=False).join()
        # Gone mid-utterance, with its decodes queued or running.
        assert server.metrics()["kvscribe_realtime_sessions"] == 1
    figures = settled(server)
    assert figures["kvscribe_realtime_sessions"] == 0
    assert figures["kvscribe_kv_reserved_bytes"] == 0
    assert transcribe(server.client(), SAMPLE).text  # the server goes on serving


@pytest.mark.model
@pytest.mark.slow
def test_sessions_past_max_sessions_are_refused_429_until_one_closes(tmp_path):
    """Each session holds threads and up to minutes of audio, and had no bound: a client
    opening sessions in a loop could take the server's memory."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    served = Served(tmp_path, "--max-sessions", "1")
    url = served.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    try:
        with _connect(served) as first:
            assert first.recv().type == "session.created"
            with pytest.raises(Exception) as refused, _connect(served) as second:
                second.recv()  # not reached: the handshake is refused
            assert "429" in str(refused.value)
            with pytest.raises(InvalidStatus) as raw:
                connect(url, additional_headers=served.auth(), open_timeout=30)
            error = json.loads(raw.value.response.body)["error"]
            assert (error["type"], error["code"]) == ("rate_limit_error", "too_many_sessions")
            assert error["message"].startswith("realtime sessions open: 1, the server's limit")
            assert served.metrics()["kvscribe_realtime_sessions"] == 1
            with urllib.request.urlopen(f"{served.url}/health", timeout=30) as health:
                sessions = json.loads(health.read())  # what the page tells a refused user
            assert (sessions["realtime_sessions"], sessions["realtime_sessions_max"]) == (1, 1)
        assert settled(served)["kvscribe_realtime_sessions"] == 0
        with _connect(served) as again:  # the closed one's place is free again
            assert again.recv().type == "session.created"
    finally:
        assert served.stop() == 0


# -- the parts ------------------------------------------------------------------------------------


@pytest.mark.model
@pytest.mark.slow
def test_mistyped_fields_are_errors_and_a_language_the_model_lacks_ends_the_session(server):
    """Each mistake was a traceback in the server's log and a dropped connection, and a
    language the model cannot decode was accepted, then left a session that swallowed
    audio and answered nothing."""
    pcm = _pcm24(load_audio(SAMPLE)[: 3 * SAMPLE_RATE])
    ga = {"type": "session.update", "event_id": "evt_mine"}
    mistakes = [
        {**ga, "session": {"type": "transcription", "audio": "pcm16"}},
        {**ga, "session": {"type": "transcription", "audio": {"input": 7}}},
        {"type": "input_audio_buffer.append", "audio": 12345},
        {"type": "transcription_session.update", "session": {"input_audio_transcription": [1]}},
    ]
    german = {"input_audio_transcription": {"language": "de"}}  # tiny.en: English only
    with _connect(server) as connection:
        assert connection.recv().type == "session.created"
        received = _Events(connection)
        for mistake in mistakes:
            connection.send(mistake)
        errors = received.until(lambda got: len(got) == len(mistakes))
        assert [e.type for e in errors] == ["error"] * len(mistakes), errors
        assert [e.error.param for e in errors] == [
            "session.audio",
            "session.audio.input",
            "audio",
            "input_audio_transcription",
        ]
        assert errors[0].error.event_id == "evt_mine"
        connection.send({"type": "transcription_session.update", "session": german})
        assert received.until(lambda got: len(got) == 1)[0].type.endswith(".updated")
        _stream(connection, pcm, paced=False).join()
        failed = received.until(lambda got: any(e.type == "error" for e in got))
        error = next(e for e in failed if e.type == "error").error
        assert error.param == "language" and "English-only" in error.message, error
        with pytest.raises(Exception) as closed:  # more audio: refused, and the socket closes
            for _ in range(20):
                connection.send(_append(pcm[: 2 * CHUNK]))
                time.sleep(0.2)
        assert "1011" in str(closed.value), closed.value
