"""Silero's speech probabilities of JFK after a run of digital silence, with and without the
detector starting afresh within the run (kvscribe/voice/silero.py, SILENCE_RESET_WINDOWS).

    .venv/bin/python benchmarks/silence_drift.py [--out silence_drift]

JFK (samples/jfk.wav) follows each run of zeros, alone or after 5 s of the realform noisy
telephone recording (speech before the pause). For each: the mean probability of JFK's
first 110 windows (3.5 s: "And so my fellow Americans, ask not"), against the same with
JFK at the file's start, and the windows over 0.5 (where speech starts). "as it was": the
LSTM stepped through the zeros (SILENCE_RESET_WINDOWS set past the run); "now": as the
module has it. In-process, the file scan kvscribe.voice.file_scan runs (its probabilities
equal the streaming detector's, tests/test_file_scan.py). Writes
benchmarks/results/OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import results_file

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.voice import silero
from kvscribe.voice.file_scan import FileScanner

ROOT = Path(__file__).resolve().parent.parent
JFK = ROOT / "samples" / "jfk.wav"
SPEECH_BEFORE = ROOT / "eval" / "realform" / "asterisk_en_ivr_dev_noisy.wav"
RUNS_SECONDS = (1, 3, 5, 8, 10, 15, 20, 25, 40, 120)
ONSET_WINDOWS = 110


def _after(head: np.ndarray, speech: np.ndarray, reset: bool) -> np.ndarray:
    """The probabilities of `speech`'s windows, `head` (whole windows) before it."""
    kept = silero.SILENCE_RESET_WINDOWS
    if not reset:
        silero.SILENCE_RESET_WINDOWS = 10**9
    try:
        found = FileScanner(2).probabilities([np.concatenate([head, speech])])
    finally:
        silero.SILENCE_RESET_WINDOWS = kept
    return found[head.size // silero.WINDOW :]


def measure() -> list[dict]:
    speech = load_audio(JFK)
    alone = FileScanner(2).probabilities([speech])
    before = {
        "zeros": np.zeros(0, dtype=np.float32),
        "5 s of speech, then zeros": load_audio(SPEECH_BEFORE)[: 5 * SAMPLE_RATE],
    }
    rows = []
    for seconds in RUNS_SECONDS:
        zeros = np.zeros(seconds * SAMPLE_RATE, dtype=np.float32)
        for name, lead in before.items():
            head = np.concatenate([lead, zeros])
            head = head[: head.size // silero.WINDOW * silero.WINDOW]
            for reset in (False, True):
                found = _after(head, speech, reset)
                rows.append(
                    {
                        "run_seconds": seconds,
                        "before": name,
                        "detector": "now" if reset else "as it was",
                        "onset_mean": float(found[:ONSET_WINDOWS].mean()),
                        "alone_onset_mean": float(alone[:ONSET_WINDOWS].mean()),
                        "windows_over_half": int((found > 0.5).sum()),
                        "alone_windows_over_half": int((alone > 0.5).sum()),
                    }
                )
    return rows


def table(rows: list[dict]) -> str:
    alone = rows[0]
    lines = [
        f"JFK alone: onset mean {alone['alone_onset_mean']:.3f}, "
        f"{alone['alone_windows_over_half']} windows over 0.5. After a run of zeros, "
        "the same figures (onset mean / windows over 0.5):",
        "",
        "| run of zeros (s) | before it | as it was | now |",
        "|---|---|---|---|",
    ]
    for index in range(0, len(rows), 2):
        was, now = rows[index], rows[index + 1]
        cells = [f"{r['onset_mean']:.3f} / {r['windows_over_half']}" for r in (was, now)]
        lines.append(f"| {was['run_seconds']} | {was['before']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="silence_drift")
    args = parser.parse_args()
    rows = measure()
    text = table(rows)
    print(text)
    meta = {"device": "cpu", "reset_windows": silero.SILENCE_RESET_WINDOWS}
    results_file.write(args.out, meta, rows, text)


if __name__ == "__main__":
    main()
