"""A realtime session's parts on their own (kvscribe/serve/realtime_protocol.py,
realtime_audio.py, realtime.py): its audio in, the configuration from either update form and
the mistakes it names, the events out, and what a failed session lets go. Against a real
server: tests/test_realtime.py."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.serve.realtime_audio import SocketAudio
from kvscribe.serve.realtime_protocol import (
    INPUT_RATE,
    EventsOut,
    SessionConfig,
    SessionError,
    parse,
    updated_config,
)
from tests.conftest import SAMPLE

pytest.importorskip("starlette")


def test_socket_audio_resamples_24_khz_pcm16_to_16_khz_chunks_across_messages():
    tone = np.sin(2 * np.pi * 440 * np.arange(INPUT_RATE) / INPUT_RATE)  # 1 s at 440 Hz
    pcm = (0.5 * tone * 32767).astype("<i2").tobytes()
    source = SocketAudio()
    for at in range(0, len(pcm), 4801):  # odd sizes: a sample split across two messages
        source.append(pcm[at : at + 4801])
    source.end()
    chunks: list[np.ndarray] = []
    source.run(chunks.append, threading.Event())
    samples = np.concatenate(chunks)
    assert abs(samples.size - SAMPLE_RATE) <= 64  # 1 s at 16 kHz, give or take the filter
    assert all(c.size == SAMPLE_RATE // 10 for c in chunks[:-1])
    spectrum = np.abs(np.fft.rfft(samples[1000:15000]))
    peak_hz = np.argmax(spectrum) * SAMPLE_RATE / 14000
    assert peak_hz == pytest.approx(440, abs=3)
    assert 0.3 < np.max(np.abs(samples[1000:15000])) < 0.6
    assert source.seconds == pytest.approx(1.0)


def test_updates_in_either_form_set_the_language_and_prompt_or_name_the_field():
    beta = {
        "type": "transcription_session.update",
        "session": {
            "input_audio_format": "pcm16",
            "input_audio_transcription": {"model": "tiny.en", "language": "en", "prompt": "JFK"},
            "turn_detection": {"type": "server_vad"},
        },
    }
    config = updated_config(SessionConfig(), beta, ("tiny.en",))
    assert (config.language, config.prompt, config.beta) == ("en", "JFK", True)
    ga = {
        "type": "session.update",
        "session": {
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}},
        },
    }
    kept = updated_config(config, ga, ("tiny.en",))
    assert (kept.language, kept.prompt, kept.beta) == ("en", "JFK", False)
    assert kept.describe("tiny.en")["audio"]["input"]["format"]["rate"] == INPUT_RATE
    # turn_detection null: the client's turns, kept by an update that leaves it out.
    manual = updated_config(
        kept, {**ga, "session": {"audio": {"input": {"turn_detection": None}}}}, ("tiny.en",)
    )
    assert manual.server_vad is False
    assert manual.describe("tiny.en")["audio"]["input"]["turn_detection"] is None
    assert updated_config(manual, ga, ("tiny.en",)).server_vad is False
    assert updated_config(manual, beta, ("tiny.en",)).server_vad is True
    unknown = {**beta, "session": {"input_audio_transcription": {"model": "large-v3"}}}
    with pytest.raises(SessionError) as raised:
        updated_config(SessionConfig(), unknown, ("tiny.en",))
    assert raised.value.code == "model_not_found"
    with pytest.raises(SessionError) as raised:
        updated_config(SessionConfig(), {**ga, "session": {"type": "realtime"}}, ("tiny.en",))
    assert raised.value.param == "session.type"


def test_commits_become_deltas_that_join_to_the_completed_text():
    sent: list[dict] = []
    out = EventsOut(sent.append)
    out.heard(-20.0, speaking=True)
    out.committed("And so my")
    out.committed("fellow Americans,")
    out.utterance_done("And so my fellow Americans,", latency=0.4)
    out.heard(-20.0, speaking=True)
    out.utterance_done("ask not", latency=0.3)  # committed whole at its end
    kinds = [e["type"] for e in sent]
    assert kinds.count("input_audio_buffer.speech_started") == 2
    first = [e for e in sent if e.get("item_id") == sent[0]["item_id"]]
    deltas = "".join(e["delta"] for e in first if e["type"].endswith(".delta"))
    assert deltas == first[-1]["transcript"] == "And so my fellow Americans,"
    committed = [e for e in sent if e["type"] == "input_audio_buffer.committed"]
    assert committed[1]["previous_item_id"] == committed[0]["item_id"]
    assert sent[-1]["kvscribe"] == {"latency_seconds": 0.3, "dropped_audio_seconds": 0.0}


def test_messages_are_bounded_and_must_be_json_events():
    assert parse(json.dumps({"type": "x"}), 100) == {"type": "x"}
    for message, code in (
        ("x" * 101, "message_too_large"),
        ("{not json", "invalid_json"),
        ("[1]", "invalid_value"),
    ):
        with pytest.raises(SessionError) as raised:
            parse(message, 100)
        assert raised.value.code == code


def test_a_language_is_checked_and_an_update_can_clear_language_and_prompt():
    beta = {"type": "transcription_session.update"}
    set_both = {**beta, "session": {"input_audio_transcription": {"language": "French"}}}
    config = updated_config(SessionConfig(prompt="JFK"), set_both, ("base",))
    assert (config.language, config.prompt) == ("fr", "JFK")  # a name becomes its code
    cleared = {"language": None, "prompt": ""}  # back to detecting, and no prompt
    clear = {**beta, "session": {"input_audio_transcription": cleared}}
    assert (updated_config(config, clear, ("base",)).language, config.prompt) == (None, "JFK")
    assert updated_config(config, clear, ("base",)).prompt is None
    for language in ("klingon", 5):
        wrong = {**beta, "session": {"input_audio_transcription": {"language": language}}}
        with pytest.raises(SessionError) as raised:
            updated_config(config, wrong, ("base",))
        assert raised.value.param == "input_audio_transcription.language"


def test_each_item_s_usage_counts_its_own_audio_once():
    """It counted the whole session so far: 5.0 s then 11.1 s for JFK's 11.1 s."""
    sent: list[dict] = []
    out = EventsOut(sent.append)
    for chunks, text in ((50, "And so my fellow Americans"), (61, "ask not")):
        for _ in range(chunks):
            out.heard(-20.0, speaking=True)
        out.utterance_done(text, latency=0.3)
    done = [e for e in sent if e["type"].endswith("transcription.completed")]
    assert [e["usage"]["seconds"] for e in done] == [5.0, 6.1]


class _FailingLanes:
    """A lane that fails each job as the server's does (a Failed event from its thread): a
    fault a test cannot cause in this process without a loaded model."""

    backend = None

    def submit(self, job) -> None:
        from kvscribe.serve.api_errors import ApiError
        from kvscribe.serve.scheduler import Failed

        error = ApiError(400, "language: model tiny.en is English-only", "language")
        threading.Thread(target=job.sink, args=(Failed(error),)).start()

    def cancel(self, job) -> None:
        pass


def test_a_failed_session_refuses_more_audio_and_lets_its_audio_go():
    """Its error pinned the session's audio in a reference cycle (about 225 MB a session on
    the server, freed only by a full collection), and audio sent after kept piling up."""
    import base64
    import gc
    import time
    import weakref

    from kvscribe.contract import DecodeRequest
    from kvscribe.live.stats import LiveStats
    from kvscribe.serve.realtime import RealtimeSession, SessionLimits

    sent: list[dict] = []
    stats = LiveStats(backend="b", profile="p", model="m", source="s", paced=True, device="cpu")
    session = RealtimeSession(_FailingLanes(), DecodeRequest(), stats, sent.append, SessionLimits())
    jfk = load_audio(SAMPLE)[: 4 * SAMPLE_RATE]  # speech, for the voice detector to hear
    at_24k = np.interp(np.arange(0, jfk.size, SAMPLE_RATE / INPUT_RATE), np.arange(jfk.size), jfk)
    speech = base64.b64encode((at_24k * 32767).astype("<i2").tobytes()).decode()
    session.append({"audio": speech})
    deadline = time.monotonic() + 30
    while session.ended is None and time.monotonic() < deadline:
        time.sleep(0.05)
    errors = [e["error"] for e in sent if e["type"] == "error"]
    assert errors and errors[0]["param"] == "language", sent
    with pytest.raises(SessionError) as refused:
        session.append({"audio": speech})
    assert refused.value.code == "session_ended"
    del refused  # its traceback holds the session
    audio = weakref.ref(session.audio)
    gc.disable()
    try:
        session.abandon()
        del session
        assert audio() is None, "the failed session's audio outlived it"
    finally:
        gc.enable()
