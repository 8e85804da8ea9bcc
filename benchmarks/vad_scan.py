"""A whole file's silero VAD scan three ways, on the project's long recordings: the model
run whole in one onnxruntime session on one thread (what the scan was), the same session on
every core (onnxruntime's intra-op threads), and kvscribe.voice.file_scan (the model cut
after its per-window convolutions, those on a thread per core, its LSTM in order: what the
scan is). Each is fed the same 30 s blocks; the probabilities are compared to the first's,
bit for bit.

    .venv/bin/python benchmarks/vad_scan.py [--repeat 5] [--threads 2] [--out vad_scan]

Times are in-process (time.perf_counter around the scan; the sessions made before), the
three ways in turn, the best and the median of --repeat rounds each. Writes
benchmarks/results/OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import results_file

from kvscribe.audio.stream import blocks, open_streamed
from kvscribe.voice.file_scan import FileScanner
from kvscribe.voice.silero import SileroVad

EVAL = Path(__file__).resolve().parent.parent / "eval"
RECORDINGS = [
    EVAL / "clips" / "espeak_longform_en.wav",
    EVAL / "realform" / "asterisk_en_ivr_dev.wav",
    EVAL / "realform" / "asterisk_fr_ivr_dev.wav",
    EVAL / "clips_joined" / "joined_real.wav",
]


def _whole(threads: int):
    def scan(pieces):
        vad = SileroVad(threads=threads)  # a session costs ~5 ms: made outside the timing
        return vad, lambda: np.concatenate([vad.probabilities(piece) for piece in pieces])

    return scan


def _split(workers: int):
    scanner = FileScanner(workers)

    def scan(pieces):
        return scanner, lambda: scanner.probabilities(pieces)

    return scan


def measure(path: Path, repeat: int, threads: int) -> dict:
    audio = open_streamed(path)
    pieces = list(blocks(audio))
    ways = {
        "whole model, 1 thread": _whole(1),
        f"whole model, {threads} intra-op threads": _whole(threads),
        f"cut in two, {threads} workers": _split(threads),
    }
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    found: dict[str, np.ndarray] = {}
    for _ in range(repeat):
        for name, way in ways.items():
            _, run = way(pieces)
            started = time.perf_counter()
            found[name] = run()
            seconds[name].append(time.perf_counter() - started)
    audio.close()
    reference = found["whole model, 1 thread"]
    return {
        "recording": path.stem,
        "audio_seconds": audio.size / 16_000,
        "ways": {
            name: {
                "best": min(times),
                "median": statistics.median(times),
                "runs": times,
                "equal_to_one_thread": bool(np.array_equal(found[name], reference)),
            }
            for name, times in seconds.items()
        },
    }


def table(rows: list[dict], repeat: int) -> str:
    names = list(rows[0]["ways"])
    lines = [
        f"Seconds to scan each recording (median of {repeat} rounds, the ways in turn; best in "
        "brackets); `same` = the probabilities equal the one-thread session's bit for bit.",
        "",
        "| recording (s of audio) | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for row in rows:
        cells = [
            f"{w['median']:.3f} ({w['best']:.3f}){', same' if w['equal_to_one_thread'] else ''}"
            for w in row["ways"].values()
        ]
        recording = f"{row['recording']} ({row['audio_seconds']:.0f})"
        lines.append(f"| {recording} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="vad_scan")
    args = parser.parse_args()
    rows = [measure(path, args.repeat, args.threads) for path in RECORDINGS]
    text = table(rows, args.repeat)
    print(text)
    meta = {"device": "cpu", "threads": args.threads, "repeat": args.repeat}
    results_file.write(args.out, meta, rows, text)


if __name__ == "__main__":
    main()
