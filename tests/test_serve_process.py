"""`kvscribe serve` as a process: SIGTERM and Ctrl-C drain, a second Ctrl-C stops at once,
a key is needed beyond loopback, and the web stack is imported by `serve` alone. Each test
starts its own server on 127.0.0.1 and stops it."""

# The server's fixtures come from tests/serving.py, and tests name them as arguments.
# ruff: noqa: F811

from __future__ import annotations

import concurrent.futures as cf
import subprocess
import sys
import time

import pytest

from tests.conftest import KVSCRIBE, LONG_FORM, ROOT, SAMPLE
from tests.serving import (  # noqa: F401 - fixtures
    KEY,
    Served,
    long_clip,
    transcribe,
)

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytestmark = [pytest.mark.model, pytest.mark.slow]


def test_sigterm_drains_the_requests_running(tmp_path, long_clip):
    served = Served(tmp_path)
    try:
        with cf.ThreadPoolExecutor(2) as pool:
            running = [pool.submit(transcribe, served.client(), p) for p in (long_clip, SAMPLE)]
            time.sleep(1.5)
            served.proc.send_signal(15)
            health = _health(served)  # a load balancer's probe sends traffic elsewhere
            session = _realtime_handshake(served)  # accepted, it died on its first audio
            texts = [r.result().text for r in running]
        assert all(texts)
        assert health[0] == 503 and health[1]["status"] == "draining"
        assert session[0] == 503 and session[1]["error"]["code"] == "shutting_down", session
        assert served.proc.wait(120) == 0
        assert "Traceback" not in served.proc.stderr.read()
    finally:
        served.stop()
    assert not list(tmp_path.glob("kvscribe-serve-*")), "the upload folder was left behind"


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    """The first Ctrl-C drains; a second, while a long request still decodes, ends the
    process at once (exit 130), saying what was not answered, without the tracebacks of
    the tasks it cancels, and removes the upload folder."""
    served = Served(tmp_path)
    try:
        idle = {"status": "ok", "queue_depth": 0, "realtime_sessions": 0}
        assert _health(served) == (200, {**idle, "realtime_sessions_max": 64})  # --max-queue's
        with cf.ThreadPoolExecutor(1) as pool:
            running = pool.submit(transcribe, served.client(), LONG_FORM)  # 182 s
            time.sleep(1.5)
            served.proc.send_signal(2)
            time.sleep(0.3)
            served.proc.send_signal(2)
            stopped = time.monotonic()
            assert served.proc.wait(30) == 130
            assert time.monotonic() - stopped < 5
            with pytest.raises(openai.APIConnectionError):
                running.result()
        said = served.proc.stderr.read()
        assert "Traceback" not in said and "1 request(s) in flight not answered" in said
    finally:
        served.stop()
    assert not list(tmp_path.glob("kvscribe-serve-*")), "the upload folder was left behind"


def _health(served: Served) -> tuple[int, dict]:
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{served.url}/health", timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as answered:
        return answered.code, json.loads(answered.read())


def _realtime_handshake(served: Served) -> tuple[int, dict]:
    """A realtime socket's handshake: (101, {}) accepted, else the refusal's status and body."""
    import json

    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    url = served.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    headers = {"Authorization": f"Bearer {KEY}"}
    try:
        with connect(url, additional_headers=headers, open_timeout=30):
            return 101, {}
    except InvalidStatus as refused:
        return refused.response.status_code, json.loads(refused.response.body or b"{}")


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
