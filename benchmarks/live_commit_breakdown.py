"""Where a live commit at a pause spends its time, on a real-time replay.

    .venv/bin/python benchmarks/live_commit_breakdown.py [--seconds 150] [--out NAME]

Replays the first SECONDS of eval/realform/asterisk_en_ivr_dev.wav through `kvscribe mic
--input` in real time (default options), in this process, with `LiveSession._decode` and
`_settle` wrapped to note when each decode starts and ends and when each pause is
committed. For every utterance committed at a pause, its commit latency is split into:
- heard: from the pause's arrival until the decode at the pause was due (`pause_heard` of
  quiet heard, in 0.1 s chunks);
- waited: from then until that decode started (a re-decode already running);
- decoded: the decode at the pause;
- after: from its end to the commit.
Medians over those utterances; the decoder's busy share of the replay too.
Writes benchmarks/results/NAME.{json,md} (default NAME: live_commit_breakdown).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np
import results_file

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.live import session

CLIP = Path(__file__).resolve().parent.parent / "eval" / "realform" / "asterisk_en_ivr_dev.wav"
PARTS = ("heard", "waited", "decoded", "after")


def traced(events: list[dict]) -> None:
    """Wrap the session's decode and settle to append what they did to `events`."""
    decode, settle = session.LiveSession._decode, session.LiveSession._settle

    def _decode(self, start, stop):
        started = time.perf_counter()
        hypothesis = decode(self, start, stop)
        paused = self._utterance.paused_at if self._utterance else None
        events.append(
            {
                "kind": "decode",
                "start": started,
                "end": time.perf_counter(),
                "pause": None if paused is None else self._arrival(paused),
                "due": None if paused is None else self._arrival(paused + self._heard),
            }
        )
        return hypothesis

    def _settle(self):
        pause = self._arrival(self._utterance.paused_at)
        events.append({"kind": "settle", "at": time.perf_counter(), "pause": pause})
        settle(self)

    session.LiveSession._decode, session.LiveSession._settle = _decode, _settle


def breakdown(events: list[dict]) -> list[dict]:
    """Per commit at a pause: its latency and the parts it is made of (seconds)."""
    rows = []
    for index, event in enumerate(events):
        if event["kind"] != "settle":
            continue
        mine = [e for e in events[:index] if e["kind"] == "decode" and e["pause"] == event["pause"]]
        if not mine:
            continue
        last = mine[-1]
        rows.append(
            {
                "latency": event["at"] - event["pause"],
                "heard": last["due"] - event["pause"],
                "waited": last["start"] - last["due"],
                "decoded": last["end"] - last["start"],
                "after": event["at"] - last["end"],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--out", default="live_commit_breakdown")
    args = parser.parse_args()
    events: list[dict] = []
    traced(events)
    samples = load_audio(CLIP)[: int(args.seconds * SAMPLE_RATE)]
    with tempfile.TemporaryDirectory() as work:
        head = Path(work) / "head.wav"
        with wave.open(str(head), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(SAMPLE_RATE)
            out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
        _run_mic(head)
    rows = breakdown(events)
    decodes = [e for e in events if e["kind"] == "decode"]
    busy = sum(e["end"] - e["start"] for e in decodes)
    span = decodes[-1]["end"] - decodes[0]["start"]
    medians = {part: statistics.median(row[part] for row in rows) for part in ("latency", *PARTS)}
    table = (
        f"The first {args.seconds:g} s of {CLIP.name} in real time, `kvscribe mic` defaults; "
        f"{len(rows)} commits at a pause; medians in seconds.\n\n"
        "| commit latency | heard (the quiet it waits for) | waited (a re-decode running) | "
        "decode at the pause | after it |\n|---|---|---|---|---|\n"
        + "| "
        + " | ".join(f"{medians[p]:.2f}" for p in ("latency", *PARTS))
        + " |\n\n"
        f"The decoder was busy {busy:.1f} s of {span:.1f} s ({busy / span:.0%}), "
        f"{len(decodes)} decodes."
    )
    print(table)
    meta = {"clip": CLIP.name, "seconds": args.seconds, "device": "cpu", "medians": medians}
    results_file.write(args.out, meta, rows, table)


def _run_mic(path: Path) -> None:
    from kvscribe.cli import run as cli  # the command without its quick process exit

    ours = sys.argv  # the result file names this script's command, not the one run inside
    sys.argv = ["kvscribe", "mic", "--input", str(path), "-q"]
    try:
        cli()
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    finally:
        sys.argv = ours


if __name__ == "__main__":
    main()
