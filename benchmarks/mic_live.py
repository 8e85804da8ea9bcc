"""`kvscribe mic --live` on a real microphone against the `--input` replay of the same file.

    .venv/bin/python benchmarks/mic_live.py [--out NAME] [--repeat N] [CLIP...]

The microphone is a private PulseAudio server (tests/audio_server.py: a null sink whose
monitor is the default source; `apt-get install pulseaudio pulseaudio-utils
libasound2-plugins libportaudio2`). Per clip, whole processes one after the other (never
concurrently: 2 cores): `kvscribe CLIP -q -f txt` offline; `kvscribe mic --live` recording
while `paplay` plays the clip into the sink in real time, Ctrl-C 1.5 s after it ends; and
`kvscribe mic --input CLIP` (a real-time replay of the file). WER against the clip's
reference (Whisper's English normaliser), commit latency p50/p95 and dropped audio from
each run's `--stats-json`. Default clips: JFK and the joined real recordings (50 s).
With --repeat N the clips are played N times over, a row each (a microphone's blocks fall
differently on every run, and so do the pauses' decodes).
Writes benchmarks/results/NAME.json and .md (NAME: mic_live unless --out says).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results_file  # noqa: E402

from kvscribe.bench.wer import pooled_wer  # noqa: E402
from tests import audio_server  # noqa: E402
from tests.conftest import KVSCRIBE, SAMPLE  # noqa: E402

DEFAULT_CLIPS = [SAMPLE, ROOT / "eval" / "clips_joined" / "joined_real.wav"]


def _stats_of(path: Path) -> dict:
    stats = json.loads(path.read_text())
    keep = ("utterances", "latency_p50_seconds", "latency_p95_seconds", "dropped_audio_seconds")
    return {key: stats[key] for key in keep} | {"source": stats["source"]}


def from_microphone(env: dict, clip: Path, folder: Path) -> tuple[str, dict]:
    heard = audio_server.record_while_playing(env, KVSCRIBE, clip, folder)
    if heard.code != 0:
        raise SystemExit(f"kvscribe mic exited {heard.code}: {heard.log[-2000:]}")
    return heard.text, _stats_of(folder / "stats.json")


def replayed(clip: Path, folder: Path) -> tuple[str, dict]:
    stats = folder / "replay.json"
    done = subprocess.run(
        [str(KVSCRIBE), "mic", "--input", str(clip), "-q", "--stats-json", str(stats)],
        capture_output=True,
        check=True,
        timeout=1800,
    )
    return done.stdout.decode(), _stats_of(stats)


def _measure(env: dict, clip: Path, work: Path, run: int) -> dict:
    folder = work / f"{clip.stem}-{run}"  # `-o` appends: each run writes files of its own
    folder.mkdir()
    reference = clip.with_suffix(".txt").read_text(encoding="utf-8")
    offline = subprocess.run(
        [str(KVSCRIBE), str(clip), "-q", "-f", "txt"], capture_output=True, check=True, text=True
    ).stdout
    row = {"clip": clip.name, "run": run, "wer_offline": pooled_wer([(reference, offline)])}
    for name, (text, stats) in (
        ("mic", from_microphone(env, clip, folder)),
        ("replay", replayed(clip, folder)),
    ):
        row[name] = stats | {"wer": pooled_wer([(reference, text)]), "text": text}
        print(clip.name, name, {k: v for k, v in row[name].items() if k != "text"})
    return row


def _arguments() -> argparse.Namespace:
    parser = results_file.arguments(__doc__)
    parser.add_argument(
        "--out",
        default="mic_live",
        metavar="NAME",
        help="write benchmarks/results/NAME.json and .md (default: %(default)s)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, metavar="N", help="play the clips N times over"
    )
    parser.add_argument(
        "clips",
        nargs="*",
        type=Path,
        metavar="CLIP",
        help="audio files, each beside its reference .txt (default: JFK and the joined real "
        "recordings)",
    )
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    name = args.out
    clips = args.clips or DEFAULT_CLIPS
    problem = audio_server.missing()
    if problem:
        raise SystemExit(problem)
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        with audio_server.running(folder / "pulse") as env:
            rows = [
                _measure(env, clip, folder, run)
                for run in range(1, args.repeat + 1)
                for clip in clips
            ]
    table = [
        "# Live mode from a real microphone against the replay of the same file",
        "",
        "tiny.en, ctranslate2 `cpu-laptop` (int8, beam 5), live defaults; the microphone is a "
        "PulseAudio null sink's monitor, the clip played into it in real time by paplay.",
        "",
        "| clip | run | WER offline | WER microphone | WER replay "
        "| latency p50 / p95 microphone (s) | latency p50 / p95 replay (s) "
        "| dropped microphone (s) |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['clip']} | {r['run']} | {r['wer_offline']:.3f} | {r['mic']['wer']:.3f} | "
            f"{r['replay']['wer']:.3f} | {r['mic']['latency_p50_seconds']:.2f} / "
            f"{r['mic']['latency_p95_seconds']:.2f} | {r['replay']['latency_p50_seconds']:.2f} / "
            f"{r['replay']['latency_p95_seconds']:.2f} | {r['mic']['dropped_audio_seconds']:.2f} |"
            for r in rows
        ),
    ]
    meta = {"device": "cpu", "model": "tiny.en", "backend": "ctranslate2", "profile": "auto"}
    results_file.write(name, meta, rows, "\n".join(table))
    print("\n".join(table))


if __name__ == "__main__":
    main()
