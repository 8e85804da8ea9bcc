"""A real `kvscribe serve` process on 127.0.0.1 for the tests: started, read, stopped."""

from __future__ import annotations

import io
import os
import select
import signal
import subprocess
import time
import urllib.request
import wave
from pathlib import Path

import numpy as np
import pytest

from kvscribe.audio import load_audio
from tests.conftest import KVSCRIBE, LONG_FORM, USER_DIRS

KEY = "test-key-not-secret"
START_SECONDS = 180  # a cold start loads the model (and converts nothing: it is embedded)


class Served:
    """`kvscribe serve --port 0` with its own TMPDIR (where its private upload folder is)."""

    def __init__(self, tmp: Path, *flags: str, key: str | None = KEY, user_cache: bool = False):
        """`user_cache`: the user's cache and config, where session fixtures build and
        export (whisper-cli, ONNX graphs), not the test's isolated ones."""
        self.tmp = tmp
        env = os.environ | {"TMPDIR": str(tmp)}
        if user_cache:
            for name, value in USER_DIRS.items():
                env.pop(name, None)
                if value is not None:
                    env[name] = value
        env.pop("KVSCRIBE_API_KEY", None)
        if key is not None:
            env["KVSCRIBE_API_KEY"] = key
        self.proc = subprocess.Popen(
            [str(KVSCRIBE), "serve", "--port", "0", "--quiet", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        ready, _, _ = select.select([self.proc.stdout], [], [], START_SECONDS)
        line = self.proc.stdout.readline() if ready else ""
        if "listening on http://" not in line:
            self.proc.kill()
            raise AssertionError(f"the server did not start: {line!r} {self.proc.stderr.read()}")
        self.url = line.split("listening on ")[1].strip()

    def client(self, key: str = KEY, retries: int = 0):
        import openai

        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=key, max_retries=retries, timeout=300
        )

    def metrics(self) -> dict[str, float]:
        request = urllib.request.Request(f"{self.url}/metrics", headers=self.auth())
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
        figures = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):  # a labelled one keyed with its labels
                name, value = line.rsplit(" ", 1)
                figures[name] = float(value)
        return figures

    @staticmethod
    def auth() -> dict[str, str]:
        return {"Authorization": f"Bearer {KEY}"}

    def spooled(self) -> list[Path]:
        """Files left in the server's private upload folder."""
        return [p for folder in self.tmp.glob("kvscribe-serve-*") for p in folder.iterdir()]

    def open_temp_files(self) -> list[str]:
        """The server's open file descriptors on uploads: its TMPDIR, or unlinked files."""
        fds = Path(f"/proc/{self.proc.pid}/fd")
        targets = []
        for fd in fds.iterdir():
            try:
                targets.append(os.readlink(fd))
            except OSError:  # closed while listed
                continue
        return [t for t in targets if t.startswith(str(self.tmp)) or t.endswith("(deleted)")]

    def stop(self, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.stdout.close()
            self.log = self.proc.stderr.read()  # what the server said, for a test to check
            self.proc.stderr.close()


def wav_bytes(samples: np.ndarray, rate: int = 16000) -> bytes:
    """Mono float samples in [-1, 1] as a 16-bit WAV file's bytes."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def silent_flac(seconds: int) -> bytes:
    """`seconds` of digital silence as FLAC: hours of it fit in a few hundred kB."""
    import av

    buffer = io.BytesIO()
    container = av.open(buffer, "w", format="flac")
    stream = container.add_stream("flac", rate=16000, layout="mono")
    second = np.zeros((1, 16000), dtype=np.int16)
    for _ in range(seconds):
        frame = av.AudioFrame.from_ndarray(second, format="s16", layout="mono")
        frame.sample_rate = 16000
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode(None):
        container.mux(packet)
    container.close()
    return buffer.getvalue()


# -- what the server tests share (tests/test_serve.py, tests/test_serve_faults.py) --

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


def transcribe(client, path: Path, **fields):
    with path.open("rb") as audio:
        return client.audio.transcriptions.create(model="whisper-1", file=audio, **fields)


def settled(served: Served) -> dict[str, float]:
    """The server's gauges once nothing is queued or running and no realtime session is
    open: a closed one counts until its threads have ended (bounded wait)."""
    deadline = time.monotonic() + BOUNDED_WAIT
    while True:
        figures = served.metrics()
        busy = (
            figures["kvscribe_queue_depth"]
            + figures["kvscribe_requests_running"]
            + figures["kvscribe_rows_in_flight"]
            + figures["kvscribe_kv_reserved_bytes"]
            + figures["kvscribe_realtime_sessions"]
        )
        if busy == 0 or time.monotonic() > deadline:
            return figures
        time.sleep(0.2)


def nothing_left(served: Served) -> None:
    figures = settled(served)
    assert figures["kvscribe_queue_depth"] == 0
    assert figures["kvscribe_requests_running"] == 0
    assert figures["kvscribe_rows_in_flight"] == 0
    assert figures["kvscribe_kv_reserved_bytes"] == 0
    assert served.spooled() == []
    assert served.open_temp_files() == []
