"""`kvscribe serve` given bad input and gone clients over raw HTTP on 127.0.0.1: each is
answered in OpenAI's error shape (or served) and leaves nothing queued, running, spooled or
open."""

# The server's fixtures come from tests/serving.py, and tests name them as arguments.
# ruff: noqa: F811

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import http.client
import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import FOX, FOX_TEXT, SAMPLE, wer
from tests.serving import (  # noqa: F401 - fixtures
    BOUNDED_WAIT,
    Served,
    long_clip,
    nothing_left,
    served,
    silent_flac,
    transcribe,
)

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytestmark = [pytest.mark.model, pytest.mark.slow]


def _raw(served: Served, body: bytes, content_type: str, length: int | None = None) -> tuple:
    """(status, JSON body) of a POST written by hand; `length` declares another length."""
    host, port = served.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Content-Type": content_type, **served.auth()}
    headers["Content-Length"] = str(len(body) if length is None else length)
    connection.request("POST", "/v1/audio/transcriptions", body=body, headers=headers)
    response = connection.getresponse()
    status, text = response.status, response.read()
    connection.close()
    return status, json.loads(text)


def _form(fields: list[tuple[str, str]], audio: bytes | None, boundary: str = "xyzzy") -> bytes:
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields
    ]
    body = "".join(parts).encode()
    if audio is not None:
        body += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                "Content-Type: audio/wav\r\n\r\n"
            ).encode()
            + audio
            + b"\r\n"
        )
    return body + f"--{boundary}--\r\n".encode()


MULTIPART = "multipart/form-data; boundary=xyzzy"


def test_malformed_bodies_are_400s_and_leave_nothing(served):
    audio = SAMPLE.read_bytes()
    model = [("model", "whisper-1")]
    cases = {
        "no boundary": (_form(model, audio), "multipart/form-data"),
        "truncated": (_form(model, audio)[:-400], MULTIPART),
        "no file part": (_form(model, None), MULTIPART),
        "thousands of fields": (_form(model + [("x", "1")] * 5000, audio), MULTIPART),
        "no model": (_form([], audio), MULTIPART),
    }
    for case, (body, content_type) in cases.items():
        status, error = _raw(served, body, content_type)
        assert status == 400, (case, error)
        assert set(error["error"]) == {"message", "type", "param", "code"}, case
        assert error["error"]["code"], case  # what a client can branch on
    nothing_left(served)


def test_wrong_routes_methods_and_bodies_get_openais_error_shape(served):
    """A GET on an audio route, a route that is not there, a JSON or raw audio body: each
    answered as OpenAI answers errors, with the fix; /metrics counts them under the
    route's template, so a client naming models cannot add series."""
    host, port = served.url.removeprefix("http://").split(":")

    def ask(method: str, path: str, body: bytes | None = None, kind: str | None = None):
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {**served.auth(), **({"Content-Type": kind} if kind else {})}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        answer = (response.status, json.loads(response.read())["error"])
        connection.close()
        return answer

    status, error = ask("GET", "/v1/audio/transcriptions")
    assert status == 405 and error["code"] == "method_not_allowed" and "POST" in error["message"]
    status, error = ask("GET", "/v2/nothing")
    assert status == 404 and "/v1/audio/transcriptions" in error["message"]
    for body, kind in ((b'{"model": "whisper-1"}', "application/json"), (b"RIFF", "audio/wav")):
        status, error = ask("POST", "/v1/audio/transcriptions", body, kind)
        assert status == 400 and error["code"] == "invalid_content_type", error
        assert "multipart/form-data" in error["message"] and kind in error["message"]
    for name in ("rnd1", "rnd2", "A" * 3000):
        assert ask("GET", f"/v1/models/{name}")[0] == 404
    figures = served.metrics()
    assert not [label for label in figures if "rnd1" in label or "AAAA" in label]
    assert figures['kvscribe_requests_total{route="/v1/models/{name:path}",status="404"}'] == 3
    assert figures['kvscribe_requests_total{route="other",status="404"}'] == 1
    nothing_left(served)


def test_field_errors_name_the_apis_fields(served):
    """A language the model cannot take, or a translation an English-only model cannot
    do, is worded with the API's fields, not the command line's flags; the granularity
    list is read with or without the brackets OpenAI's clients put after its name."""
    audio = FOX.read_bytes()
    model = [("model", "whisper-1")]
    status, error = _raw(served, _form([*model, ("language", "klingon")], audio), MULTIPART)
    assert status == 400 and error["error"]["param"] == "language"
    assert error["error"]["message"].startswith("language: unknown language code 'klingon'")
    status, error = _raw(served, _form([*model, ("language", "de")], audio), MULTIPART)
    assert "English-only" in error["error"]["message"]
    assert "--language" not in error["error"]["message"]
    for bad in (("temperature", "5"), ("stream", "true"), ("response_format", "doc")):
        fields = [*model, ("response_format", "srt"), bad] if bad[0] == "stream" else [*model, bad]
        status, error = _raw(served, _form(fields, audio), MULTIPART)
        assert status == 400 and error["error"]["param"] == bad[0], error
        assert error["error"]["code"] == "invalid_value", error
    fields = [*model, ("response_format", "verbose_json"), ("timestamp_granularities", "word")]
    status, verbose = _raw(served, _form(fields, audio), MULTIPART)
    assert status == 200 and wer(FOX_TEXT, " ".join(w["word"] for w in verbose["words"])) < 0.1
    client = served.client()
    with pytest.raises(openai.BadRequestError) as refused, FOX.open("rb") as audio:
        client.audio.translations.create(model="whisper-1", file=audio)
    assert "cannot translate" in refused.value.message and "--task" not in refused.value.message
    nothing_left(served)


def test_an_oversized_body_is_refused_before_or_while_it_is_read(served):
    counted = 'kvscribe_requests_total{route="/v1/audio/transcriptions",status="413"}'
    before = served.metrics().get(counted, 0)
    host, port = served.url.removeprefix("http://").split(":")
    # Declared: 413 before any of the body is sent.
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.putrequest("POST", "/v1/audio/transcriptions")
    connection.putheader("Content-Type", MULTIPART)
    connection.putheader("Content-Length", str(200 * 1024 * 1024))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and json.loads(response.read())["error"]["code"] == (
        "body_too_large"
    )
    connection.close()
    # Not declared (chunked): 413 once the bytes read pass the limit.
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    chunks = (
        _form([("model", "whisper-1")], b"\0" * (3 * 1024 * 1024))[i : i + 65536]
        for i in range(0, 4 * 1024 * 1024, 65536)
    )
    connection.request(
        "POST",
        "/v1/audio/transcriptions",
        body=chunks,
        headers={"Content-Type": MULTIPART, **served.auth()},
        encode_chunked=True,
    )
    response = connection.getresponse()  # the rest was read and dropped: no reset
    error = json.loads(response.read())["error"]
    assert response.status == 413 and error["code"] == "body_too_large"
    assert "--max-body-mb" in error["message"]
    connection.close()
    assert served.metrics()[counted] == before + 2  # the declared one too
    nothing_left(served)


def test_a_stalled_upload_is_answered_408_when_its_time_is_up(tmp_path):
    """Half a body, then nothing: 408 at --upload-timeout (it came 10 s later while the
    server waited for the rest, which a stalled client never sends), naming the option."""
    served = Served(tmp_path, "--upload-timeout", "2")
    try:
        host, port = served.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        connection.putrequest("POST", "/v1/audio/transcriptions")
        for name, value in {"Content-Type": MULTIPART, **served.auth()}.items():
            connection.putheader(name, value)
        body = _form([("model", "whisper-1")], SAMPLE.read_bytes())
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders()
        started = time.monotonic()
        connection.send(body[: len(body) // 2])
        response = connection.getresponse()
        waited = time.monotonic() - started
        error = json.loads(response.read())["error"]
        connection.close()
        assert response.status == 408 and "--upload-timeout" in error["message"], error
        assert 1.9 < waited < 6, waited
        nothing_left(served)
    finally:
        served.stop()


def test_an_answer_given_before_the_upload_ends_reaches_the_client(served):
    """A wrong key (401) or a declared length over the limit (413) is answered before the
    body is read. Closing a socket with the upload unread resets the connection, which can
    drop the answer still queued (the SDK raised APIConnectionError about one time in ten):
    the server reads and drops the rest first, so a client that pauses mid-upload and then
    sends the rest reads its whole answer."""
    form = _form([("model", "whisper-1")], bytes(1_900_000))
    for headers, body, status in (
        ({"Authorization": "Bearer wrong"}, form, 401),
        (served.auth(), form + bytes(1_500_000), 413),  # declared 3.4 MB, limit 2 MiB
    ):
        host, port = served.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        connection.putrequest("POST", "/v1/audio/transcriptions")
        for name, value in {"Content-Type": MULTIPART, **headers}.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders()
        connection.send(body[:500_000])
        time.sleep(1.0)  # the server has answered; an unread upload would reset us now
        connection.send(body[500_000:])
        response = connection.getresponse()
        error = json.loads(response.read())["error"]
        connection.close()
        assert response.status == status, error
    nothing_left(served)


def test_a_decompression_bomb_stops_at_the_duration_limit(served):
    """6 minutes of silence in 70 kB of FLAC, against --max-audio-minutes 5."""
    bomb = silent_flac(6 * 60)
    assert len(bomb) < 200_000
    status, error = _raw(served, _form([("model", "whisper-1")], bomb), MULTIPART)
    assert status == 413 and error["error"]["code"] == "audio_too_long"
    nothing_left(served)


def test_a_client_that_disconnects_mid_upload_leaves_nothing(served):
    host, port = served.url.removeprefix("http://").split(":")
    body = _form([("model", "whisper-1")], SAMPLE.read_bytes())
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.putrequest("POST", "/v1/audio/transcriptions")
    for name, value in {
        "Content-Type": MULTIPART,
        "Content-Length": str(len(body)),
        **served.auth(),
    }.items():
        connection.putheader(name, value)
    connection.endheaders()
    connection.send(body[: len(body) // 2])
    connection.close()
    nothing_left(served)


def test_a_cancelled_request_leaves_the_engine_within_a_turn(served, long_clip):
    """A streaming client that goes after its first delta: its job leaves the engine at
    its next turn, and a short request after it is served."""
    body = _form([("model", "whisper-1"), ("stream", "true")], long_clip.read_bytes())
    host, port = served.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": MULTIPART, **served.auth()}
    connection.request("POST", "/v1/audio/transcriptions", body=body, headers=headers)
    response = connection.getresponse()
    assert response.status == 200
    first = response.readline()
    while not first.startswith(b"data:"):
        first = response.readline()
    assert b"transcript.text.delta" in first
    connection.close()
    nothing_left(served)
    assert wer(FOX_TEXT, transcribe(served.client(), FOX).text) <= 0.1


def test_a_streaming_client_that_stops_reading_holds_up_no_one(served, long_clip):
    """A client that asks for a stream and reads nothing: the others are served meanwhile,
    and once it goes its request leaves nothing behind."""
    body = _form([("model", "whisper-1"), ("stream", "true")], long_clip.read_bytes())
    host, port = served.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": MULTIPART, **served.auth()}
    connection.request("POST", "/v1/audio/transcriptions", body=body, headers=headers)
    try:
        assert wer(FOX_TEXT, transcribe(served.client(), FOX).text) <= 0.1
    finally:
        connection.close()
    nothing_left(served)


def _kill_child(pid: int, name: str) -> bool:
    """SIGKILL the first child of `pid` whose command is `name`, polling (bounded). Children
    are found by the parent pid in /proc/N/stat (after the command's closing parenthesis)."""
    deadline = time.monotonic() + BOUNDED_WAIT
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError):
                text = stat.read_text()
                command, rest = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1]
                if command == name and int(rest.split()[1]) == pid:
                    os.kill(int(stat.parent.name), signal.SIGKILL)
                    return True
        time.sleep(0.05)
    return False


@pytest.mark.whispercpp
def test_an_engine_that_dies_on_one_request_fails_only_that_one(tmp_path, long_clip, whisper_cli):
    """whisper-cli killed (SIGKILL, as the kernel's OOM killer would) while it decodes one
    request: that request is answered 500 engine_error in OpenAI's shape, and the server
    goes on to serve the next one, with its right text."""
    served = Served(tmp_path, "--backend", "whispercpp", "--lanes", "1", user_cache=True)
    try:
        with cf.ThreadPoolExecutor(1) as pool:
            doomed = pool.submit(transcribe, served.client(), long_clip)
            assert _kill_child(served.proc.pid, "whisper-cli")
            with pytest.raises(openai.InternalServerError) as failed:
                doomed.result()
        assert failed.value.body["code"] == "engine_error", failed.value.body
        assert wer(FOX_TEXT, transcribe(served.client(), FOX).text) < 0.1
        nothing_left(served)
    finally:
        assert served.stop() == 0
