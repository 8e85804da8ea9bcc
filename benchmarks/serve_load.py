"""`kvscribe serve` under load, beside the servers users run today, on the same audio,
model files and cores: whisper.cpp's own server (built from the source kvscribe builds
whisper-cli from: benchmarks/peers/whisper_server.py) and faster-whisper behind a lock
(benchmarks/peers/serial_server.py, the way the popular servers run it).

    .venv/bin/python benchmarks/serve_load.py [--clients 1 2 4 8 16] [--servers ...]

For each number of concurrent clients N, each server is started as a whole process
(interleaved: every server at N before any at the next N), warmed up with one request,
then N client threads send one mix of requests over 127.0.0.1, each thread taking the
next request when its last is answered (a bounded list: the loop ends when it is empty):
the 6-minute realform recording first, then the short real clips, four times over. Every
file is sent as 16 kHz mono WAV bytes, the same to every server (whisper.cpp's server
takes no other rate without ffmpeg). Figures: latency p50/p95 of the short requests, the
long one's latency, throughput (audio seconds per wall second over the whole mix), the
server's peak RSS (VmHWM), errors by status. For kvscribe the latency of a short request
alone is measured too, and `kvscribe` run once over the same files as one folder (a
whole process: model load included) gives the batched throughput to compare.
Writes benchmarks/results/serve_load.{json,md}.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import http.client
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402

from kvscribe.audio import load_audio  # noqa: E402

PYTHON = Path(sys.executable)
KVSCRIBE = PYTHON.parent / "kvscribe"
LONG = ROOT / "eval" / "realform" / "asterisk_en_ivr_dev.wav"
SHORTS = sorted((ROOT / "eval" / "clips").glob("ps_*.wav"))
ROUNDS = 4  # the short clips, sent this many times over in one mix
THREADS = 2
BEAMS = 5
SERVERS = ("kvscribe", "serial-faster-whisper", "whisper.cpp-server")


@dataclass
class Request:
    name: str
    seconds: float
    body: bytes


def wav(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def multipart(audio: bytes, fields: dict[str, str]) -> bytes:
    parts = [
        f'--kvb\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
        for k, v in fields.items()
    ]
    head = '--kvb\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
    return (
        "".join(parts).encode()
        + (head + "Content-Type: audio/wav\r\n\r\n").encode()
        + (audio + b"\r\n--kvb--\r\n")
    )


def the_mix(folder: Path) -> tuple[list[tuple[str, float, bytes]], list[Path]]:
    """(name, seconds, WAV bytes) of the mix, and the WAV files written for the folder run."""
    clips = []
    for path in [LONG, *SHORTS]:
        samples = load_audio(path)
        data = wav(samples)
        (folder / f"{path.stem}.wav").write_bytes(data)
        clips.append((path.stem, samples.size / 16000, data))
    mix = [clips[0], *clips[1:] * ROUNDS]
    return mix, sorted(folder.glob("*.wav"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """One server process, its route, and the form fields it wants."""

    def __init__(self, kind: str, models: dict[str, str]):
        self.kind = kind
        port = free_port()
        self.port = port
        self.path = "/v1/audio/transcriptions"
        self.fields = {"model": "whisper-1", "response_format": "json"}
        if kind == "kvscribe":
            # Its default: a single-threaded lane per core (2 threads in all here).
            argv = [str(KVSCRIBE), "serve", "--port", str(port), "--quiet"]
        elif kind == "serial-faster-whisper":
            script = ROOT / "benchmarks" / "peers" / "serial_server.py"
            argv = [str(PYTHON), str(script), "--model-dir", models["ct2"], "--port", str(port)]
            argv += ["--threads", str(THREADS), "--beam-size", str(BEAMS)]
        else:
            sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))
            from whisper_server import server_binary

            argv = [str(server_binary()), "-m", models["ggml"], "--port", str(port)]
            argv += ["-t", str(THREADS), "-bs", str(BEAMS), "--inference-path", self.path]
            self.fields = {"response_format": "json", "temperature": "0.0"}
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_until_listening()

    def _wait_until_listening(self, limit: float = 180) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited: {self.proc.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.kind} did not listen within {limit} s")

    def send(self, audio: bytes) -> tuple[int, float, str]:
        """(status, seconds, text) of one request."""
        body = multipart(audio, self.fields)
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1800)
        headers = {"Content-Type": "multipart/form-data; boundary=kvb"}
        connection.request("POST", self.path, body=body, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        connection.close()
        text = json.loads(payload).get("text", "") if response.status == 200 else ""
        return response.status, time.perf_counter() - started, text

    def peak_rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc.stderr.close()


def load(server: Server, mix, clients: int) -> dict:
    """The mix through `clients` threads; per request (name, seconds of audio, status,
    latency)."""
    pending = list(mix)
    answers = []

    def client() -> None:
        while pending:
            try:
                name, seconds, audio = pending.pop(0)
            except IndexError:
                return
            status, latency, _ = server.send(audio)
            answers.append((name, seconds, status, latency))

    started = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as pool:
        for done in [pool.submit(client) for _ in range(clients)]:
            done.result()
    wall = time.perf_counter() - started
    ok = [a for a in answers if a[2] == 200]
    shorts = sorted(a[3] for a in ok if a[1] <= 30)
    longs = [a[3] for a in ok if a[1] > 30]
    errors: dict[str, int] = {}
    for answer in answers:
        if answer[2] != 200:
            errors[str(answer[2])] = errors.get(str(answer[2]), 0) + 1
    return {
        "server": server.kind,
        "clients": clients,
        "requests": len(answers),
        "wall_seconds": round(wall, 2),
        "throughput_audio_s_per_s": round(sum(a[1] for a in ok) / wall, 2),
        "short_p50_s": round(statistics.median(shorts), 3) if shorts else None,
        "short_p95_s": round(_p95(shorts), 3) if shorts else None,
        "long_s": round(longs[0], 2) if longs else None,
        "peak_rss_bytes": server.peak_rss(),
        "errors": errors,
    }


def _p95(ordered: list[float]) -> float:
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]


def solo_short(server: Server, mix) -> float:
    """The median latency of each short clip sent alone, one after another."""
    shorts = [m for m in mix if m[1] <= 30][: len(SHORTS)]
    return round(statistics.median(server.send(m[2])[1] for m in shorts), 3)


def folder_run(files: list[Path], out: Path) -> dict:
    """`kvscribe` over the same WAV files as one folder run (a whole process, its defaults:
    a single-threaded worker per core)."""
    started = time.perf_counter()
    argv = [str(KVSCRIBE), *map(str, files), "-o", str(out), "-f", "json", "-q"]
    subprocess.run(argv, check=True, capture_output=True)
    wall = time.perf_counter() - started
    seconds = sum(load_audio(f).size / 16000 for f in files)
    return {"wall_seconds": round(wall, 2), "audio_seconds": round(seconds, 1)}


def model_files() -> dict[str, str]:
    from kvscribe import models

    return {
        "ct2": str(models.resolve(None, ("ctranslate2",)).path),
        "ggml": str(models.resolve(None, ("ggml",)).path),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=SERVERS)
    parser.add_argument("--out", default="serve_load", help="results file name")
    args = parser.parse_args()
    models = model_files()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvscribe-serve-load-") as work:
        mix, files = the_mix(Path(work))
        for clients in args.clients:
            for kind in args.servers:
                server = Server(kind, models)
                try:
                    server.send(mix[1][2])  # warm-up
                    row = load(server, mix, clients)
                    if kind == "kvscribe" and clients == 1:
                        row["short_solo_p50_s"] = solo_short(server, mix)
                finally:
                    server.stop()
                rows.append(row)
                print(json.dumps(row), flush=True)
        folder = folder_run(files, Path(work) / "out")
    total = sum(m[1] for m in mix)
    meta = {
        "device": "cpu",
        "mix": f"{LONG.name} ({mix[0][1]:.0f} s) + {len(SHORTS)} short clips x {ROUNDS} "
        f"= {len(mix)} requests, {total:.0f} s of audio",
        "threads": THREADS,
        "beam_size": BEAMS,
        "folder_run": folder,
        "units": "seconds: wall clock; throughput: audio seconds per wall second; "
        "bytes: peak RSS (VmHWM), MB = 10^6 bytes",
    }
    results_file.write(args.out, meta, rows, _markdown(rows, meta))


def _markdown(rows: list[dict], meta: dict) -> str:
    folder = meta["folder_run"]
    lines = [
        "# `kvscribe serve` under load, beside whisper.cpp's server and faster-whisper behind "
        "a lock",
        "",
        f"Mix: {meta['mix']}; {meta['threads']} threads, beam {meta['beam_size']}, tiny.en "
        "(the same model files: CTranslate2 int8, ggml). The long recording is sent first.",
        "",
        "| clients | server | throughput | short p50 | short p95 | long | peak RSS (MB) | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        errors = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "none"
        lines.append(
            f"| {r['clients']} | {r['server']} | {r['throughput_audio_s_per_s']} | "
            f"{r['short_p50_s']} | {r['short_p95_s']} | {r['long_s']} | "
            f"{r['peak_rss_bytes'] / 1e6:.0f} | {errors} |"
        )
    solo = next((r.get("short_solo_p50_s") for r in rows if "short_solo_p50_s" in r), None)
    lines += [
        "",
        f"A short request alone on `kvscribe serve`: {solo} s (median). `kvscribe` over the "
        f"same files as one folder run: {folder['audio_seconds']} s of audio in "
        f"{folder['wall_seconds']} s (a whole process, model load included), "
        f"{folder['audio_seconds'] / folder['wall_seconds']:.2f} audio seconds per second.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    main()
