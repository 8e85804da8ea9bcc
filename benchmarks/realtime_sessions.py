"""Realtime sessions of `kvscribe serve` against `kvscribe mic --live` on the same audio, and
several sessions at once beside file requests.

    .venv/bin/python benchmarks/realtime_sessions.py [--clips jfk,realform] [--sessions 4]
        [--together-clip joined] [--out realtime_sessions]

1. Per clip, one after the other, never at once (2 cores): `kvscribe mic --input CLIP
   --stats-json` replayed in real time (a whole process), then one realtime session on a
   `kvscribe serve` process (the openai package's realtime client over 127.0.0.1), the clip
   sent as PCM16 at 24 kHz, 0.1 s every 0.1 s, then 1.5 s of quiet. Both measure commit
   latency the same way: from the end of an utterance's speech to its commit (mic: its
   --stats-json; the server: each `completed` event's `kvscribe.latency_seconds`). WER of
   both, and of the same file sent to the server's HTTP API (offline), after Whisper's
   English normaliser.
2. `--sessions` sessions at once on a fresh server, each streaming `--together-clip` in
   real time, while one client thread sends file requests (the eval's short real clips, in
   turn) until the sessions end: each session's latency p50/p95 and dropped audio, the file
   requests' throughput (audio seconds per wall second) and latency, and the KV bytes
   reserved against the budget (polled from /metrics every 0.2 s).
Writes benchmarks/results/OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import base64
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import results_file  # noqa: E402

from kvscribe.audio import SAMPLE_RATE, load_audio  # noqa: E402
from kvscribe.bench.wer import pooled_wer  # noqa: E402
from kvscribe.live.stats import percentile  # noqa: E402
from tests.serving import Served  # noqa: E402

KVSCRIBE = Path(sys.executable).parent / "kvscribe"
CLIPS = {
    "jfk": ROOT / "samples" / "jfk.wav",
    "realform": ROOT / "eval" / "realform" / "asterisk_en_ivr_dev.wav",
    "joined": ROOT / "eval" / "clips_joined" / "joined_real.wav",
}
SHORTS = sorted((ROOT / "eval" / "clips").glob("ps_*.wav"))
RATE = 24_000
QUIET_AFTER = 1.5  # seconds of silence sent after a clip: its last utterance ends in it
IDLE_AFTER = 15.0  # seconds without an event, once all audio is sent: the session is done


def pcm24(path: Path) -> bytes:
    samples = load_audio(path)
    wanted = round(samples.size * RATE / SAMPLE_RATE)
    positions = np.linspace(0, samples.size - 1, wanted)
    resampled = np.interp(positions, np.arange(samples.size), samples)
    quiet = np.zeros(int(QUIET_AFTER * RATE))
    return (np.clip(np.concatenate([resampled, quiet]), -1, 1) * 32767).astype("<i2").tobytes()


def session(server: Served, pcm: bytes, clip_seconds: float) -> dict:
    """One realtime session, the audio sent in real time; its completed utterances."""
    completed, sent_done = [], threading.Event()
    started = last_event = time.monotonic()
    with server.client().realtime.connect(
        model="whisper-1", extra_query={"intent": "transcription"}
    ) as connection:
        connection.recv()  # session.created

        def send() -> None:
            chunk = RATE // 10 * 2
            for n, at in enumerate(range(0, len(pcm), chunk)):
                time.sleep(max(0.0, started + n * 0.1 - time.monotonic()))
                connection.send(
                    {
                        "type": "input_audio_buffer.append",
                        "audio": base64.b64encode(pcm[at : at + chunk]).decode(),
                    }
                )
            sent_done.set()

        arrived: queue.Queue = queue.Queue()

        def receive() -> None:
            while True:
                try:
                    arrived.put(connection.recv())
                except Exception:  # closed
                    return

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        threading.Thread(target=receive, daemon=True).start()
        stopped_ms = 0
        deadline = started + clip_seconds + QUIET_AFTER + 120
        while time.monotonic() < deadline:
            try:
                event = arrived.get(timeout=1.0)
            except queue.Empty:
                # A recording that ends in quiet: its last utterance completed long ago.
                if sent_done.is_set() and time.monotonic() - last_event > IDLE_AFTER:
                    break
                continue
            last_event = time.monotonic()
            if event.type == "input_audio_buffer.speech_stopped":
                stopped_ms = event.audio_end_ms
            elif event.type.endswith("transcription.completed"):
                completed.append(event.model_extra.get("kvscribe", {}) | {"text": event.transcript})
                # The last utterance ends in the quiet sent after the clip.
                if sent_done.is_set() and stopped_ms >= clip_seconds * 1000:
                    break
        sender.join()
    latencies = [c["latency_seconds"] for c in completed]
    return {
        "text": " ".join(c["text"] for c in completed),
        "utterances": len(completed),
        "latencies_seconds": latencies,
        "latency_p50_seconds": percentile(latencies, 0.5),
        "latency_p95_seconds": percentile(latencies, 0.95),
        "dropped_audio_seconds": completed[-1]["dropped_audio_seconds"] if completed else None,
        "wall_seconds": time.monotonic() - started,
    }


def mic_replay(clip: Path) -> dict:
    """`kvscribe mic --input CLIP` in real time, a whole process."""
    with tempfile.TemporaryDirectory() as work:
        stats_path = Path(work) / "stats.json"
        done = subprocess.run(
            [str(KVSCRIBE), "mic", "--input", str(clip), "-q", "--stats-json", str(stats_path)],
            capture_output=True,
            text=True,
            check=True,
        )
        import json

        stats = json.loads(stats_path.read_text())
    return {
        "text": done.stdout,
        "utterances": stats["utterances"],
        "latencies_seconds": stats["latencies_seconds"],
        "latency_p50_seconds": stats["latency_p50_seconds"],
        "latency_p95_seconds": stats["latency_p95_seconds"],
        "dropped_audio_seconds": stats["dropped_audio_seconds"],
    }


def offline(server: Served, clip: Path) -> str:
    with clip.open("rb") as audio:
        return server.client().audio.transcriptions.create(model="whisper-1", file=audio).text


def one_by_one(clips: list[str], folder: Path) -> list[dict]:
    rows = []
    for name in clips:
        clip = CLIPS[name]
        reference = clip.with_suffix(".txt").read_text(encoding="utf-8")
        seconds = load_audio(clip).size / SAMPLE_RATE
        mic = mic_replay(clip)
        server = Served(folder, key=None)
        try:
            text_offline = offline(server, clip)
            realtime = session(server, pcm24(clip), seconds)
        finally:
            server.stop()
        for way, run in (("kvscribe mic --live", mic), ("realtime session", realtime)):
            rows.append(
                {
                    "clip": name,
                    "audio_seconds": seconds,
                    "way": way,
                    "wer": pooled_wer([(reference, run["text"])]),
                    "wer_offline": pooled_wer([(reference, text_offline)]),
                    **run,
                }
            )
            print(_row(rows[-1]), flush=True)
    return rows


def together(sessions: int, clip_name: str, folder: Path) -> dict:
    clip = CLIPS[clip_name]
    seconds = load_audio(clip).size / SAMPLE_RATE
    pcm = pcm24(clip)
    server = Served(folder, key=None)
    kv_peak, budget, stop = [0.0], [None], threading.Event()

    def poll() -> None:
        while not stop.is_set():
            figures = server.metrics()
            kv_peak[0] = max(kv_peak[0], figures.get("kvscribe_kv_reserved_bytes", 0.0))
            budget[0] = figures.get("kvscribe_kv_budget_bytes")
            stop.wait(0.2)

    files = {"latencies": [], "audio_seconds": 0.0}

    def file_requests() -> None:
        turn = 0
        while not stop.is_set():
            path = SHORTS[turn % len(SHORTS)]
            began = time.monotonic()
            offline(server, path)
            files["latencies"].append(time.monotonic() - began)
            files["audio_seconds"] += load_audio(path).size / SAMPLE_RATE
            turn += 1

    try:
        offline(server, SHORTS[0])  # warm
        threads = [threading.Thread(target=poll, daemon=True)]
        threads.append(threading.Thread(target=file_requests, daemon=True))
        began = time.monotonic()
        for thread in threads:
            thread.start()
        results: list[dict | None] = [None] * sessions

        def one(i: int) -> None:
            results[i] = session(server, pcm, seconds)

        runners = [threading.Thread(target=one, args=(i,)) for i in range(sessions)]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()
        wall = time.monotonic() - began
        stop.set()
        for thread in threads:
            thread.join(120)
    finally:
        stop.set()
        server.stop()
    reference = clip.with_suffix(".txt").read_text(encoding="utf-8")
    per_session = [
        {
            "session": i + 1,
            "wer": pooled_wer([(reference, r["text"])]),
            **{k: r[k] for k in r if k != "text"},
            "text": r["text"],
        }
        for i, r in enumerate(results)
        if r is not None
    ]
    return {
        "clip": clip_name,
        "sessions": per_session,
        "file_requests": len(files["latencies"]),
        "file_audio_seconds": files["audio_seconds"],
        "file_throughput": files["audio_seconds"] / wall,
        "file_latency_p50_seconds": percentile(files["latencies"], 0.5),
        "file_latency_p95_seconds": percentile(files["latencies"], 0.95),
        "kv_reserved_peak_bytes": kv_peak[0],
        "kv_budget_bytes": budget[0],
        "wall_seconds": wall,
    }


def _row(r: dict) -> str:
    return (
        f"| {r['clip']} ({r['audio_seconds']:.0f} s) | {r['way']} | {r['wer_offline']:.3f} | "
        f"{r['wer']:.3f} | {_num(r['latency_p50_seconds'])} / {_num(r['latency_p95_seconds'])} "
        f"| {r['utterances']} | {_num(r['dropped_audio_seconds'], '.1f')} |"
    )


def _num(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _markdown(rows: list[dict], crowd: dict | None) -> str:
    lines = [
        "One at a time, each clip sent in real time (commit latency: end of an utterance's "
        "speech to its commit, seconds):",
        "",
        "| clip | way | WER offline (HTTP API) | WER live | commit latency p50 / p95 (s) "
        "| utterances | dropped audio (s) |",
        "|---|---|---|---|---|---|---|",
        *(_row(r) for r in rows),
    ]
    if crowd:
        lines += [
            "",
            f"{len(crowd['sessions'])} sessions at once, each streaming {crowd['clip']} in real "
            f"time, beside one client sending the short real clips in turn "
            f"({crowd['wall_seconds']:.1f} s):",
            "",
            "| session | WER | commit latency p50 / p95 (s) | utterances | dropped audio (s) |",
            "|---|---|---|---|---|",
        ]
        for s in crowd["sessions"]:
            lines.append(
                f"| {s['session']} | {s['wer']:.3f} | {_num(s['latency_p50_seconds'])} / "
                f"{_num(s['latency_p95_seconds'])} | {s['utterances']} | "
                f"{_num(s['dropped_audio_seconds'], '.1f')} |"
            )
        budget = crowd["kv_budget_bytes"]
        lines += [
            "",
            f"File requests beside them: {crowd['file_requests']}, "
            f"{crowd['file_audio_seconds']:.1f} s of audio, "
            f"{crowd['file_throughput']:.2f} audio seconds per second, latency p50 / p95 "
            f"{_num(crowd['file_latency_p50_seconds'])} / "
            f"{_num(crowd['file_latency_p95_seconds'])} s. KV reserved at most "
            f"{crowd['kv_reserved_peak_bytes'] / 1e6:.1f} MB (estimated by the engine, polled "
            "every 0.2 s) "
            + (f"of a {budget / 1e6:.1f} MB budget." if budget else "(no budget set)."),
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clips", default="jfk,realform")
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--together-clip", default="joined", choices=sorted(CLIPS))
    parser.add_argument("--out", default="realtime_sessions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        rows = one_by_one([c for c in args.clips.split(",") if c], folder)
        crowd = together(args.sessions, args.together_clip, folder) if args.sessions else None
    markdown = _markdown(rows, crowd)
    print(markdown)
    meta = {
        "device": "cpu",
        "server": "kvscribe serve (defaults: ctranslate2, profile auto), no API key, 127.0.0.1",
        "client": "openai package's realtime client; PCM16 24 kHz, 0.1 s a message",
        "timing": "commit latency from live mode's own clock (mic --stats-json; the "
        "server's completed events), seconds",
    }
    results_file.write(args.out, meta, rows + ([crowd] if crowd else []), markdown)


if __name__ == "__main__":
    main()
