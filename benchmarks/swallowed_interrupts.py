"""Ctrl-C or SIGTERM sent while audio decodes: how many stop the decode, and how many a native
library swallows (kvscribe/interrupts.py).

    .venv/bin/python benchmarks/swallowed_interrupts.py [--repeat N]

The first 60 s of the English telephone recording (an 8 kHz WAV: every sample goes through
PyAV's resampler), decoded by `kvscribe.audio.load_audio` in this process, N times per
setting, the settings alternating. During each decode a timer thread sends this process one
SIGTERM at a random moment; the handler is kvscribe's (it counts what it raises and raises
`Terminated`). A decode the signal stopped raised it; one that returned whole although the
handler ran during it lost the signal. Settings: kvscribe's decode as it is, and the same
with the check after each resampled step taken out (what the decode was before). Writes
benchmarks/results/swallowed_interrupts.json and .md.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results_file  # noqa: E402

from kvscribe import interrupts  # noqa: E402
from kvscribe.audio import load_audio  # noqa: E402
from kvscribe.errors import Terminated  # noqa: E402

RECORDING = ROOT / "eval" / "realform" / "asterisk_en_ivr_dev.wav"
SECONDS = 60
SETTINGS = ("checked", "unchecked")
_state: dict = {}


def _head(path: Path) -> Path:
    with wave.open(str(RECORDING)) as source:
        params, frames = source.getparams(), source.readframes(SECONDS * source.getframerate())
    with wave.open(str(path), "wb") as out:
        out.setparams(params)
        out.writeframes(frames)
    return path


def _terminate(number, frame) -> None:
    _state["during"] = _state.get("decoding", False)
    raise interrupts.raising(Terminated())


def _one(path: Path, seconds: float) -> str:
    """'stopped', 'lost' (the handler ran during the decode, which returned whole) or
    'after' (the timer fired once the decode had ended: not counted)."""
    _state.clear()
    timer = threading.Timer(random.uniform(0, seconds), os.kill, (os.getpid(), signal.SIGTERM))
    outcome = "after"
    try:
        timer.start()
        _state["decoding"] = True
        try:
            load_audio(path)
        finally:
            _state["decoding"] = False
        outcome = "lost" if _state.get("during") else "after"
        timer.join()
        time.sleep(0.02)  # a signal still pending is handled here, outside the decode
    except Terminated:
        outcome = "stopped" if _state.get("during") else "after"
    timer.join()
    return outcome


def _decode_seconds(path: Path) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        load_audio(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    args = results_file.arguments(__doc__, repeat=1000).parse_args()
    signal.signal(signal.SIGTERM, _terminate)
    checked = interrupts.unswallowed
    counts = {name: {"stopped": 0, "lost": 0, "after": 0} for name in SETTINGS}
    with tempfile.TemporaryDirectory() as folder:
        path = _head(Path(folder) / "head.wav")
        seconds = _decode_seconds(path)
        for _ in range(args.repeat):
            for name in SETTINGS:
                interrupts.unswallowed = checked if name == "checked" else (lambda items: items)
                counts[name][_one(path, seconds)] += 1
    interrupts.unswallowed = checked
    rows = [{"setting": name, **counts[name]} for name in SETTINGS]
    lines = [
        f"{args.repeat} decodes per setting of the telephone recording's first {SECONDS} s "
        f"({seconds:.3f} s a decode), one SIGTERM at a random moment of each:",
        "",
        "| decode | signals during a decode | stopped it | lost (the decode returned whole) |",
        "|---|---|---|---|",
    ]
    for row in rows:
        during = row["stopped"] + row["lost"]
        lines.append(f"| {row['setting']} | {during} | {row['stopped']} | {row['lost']} |")
    lines += [
        "",
        "Signals that landed after a decode had ended are not counted.",
    ]
    results_file.write(
        "swallowed_interrupts",
        {"units": "counts of signals; seconds: wall clock", "decode_seconds": seconds},
        rows,
        "\n".join(lines),
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
