"""kvscribe's whispercpp backend vs whisper-cli called directly, same flags, same clip.

    .venv/bin/python benchmarks/whispercpp_overhead.py [CLIP] [--repeat N] [--profile NAME]

Each repeat runs both, interleaved, as whole processes timed from outside:
`kvscribe CLIP -b whispercpp -p PROFILE -f txt -q` (Python start-up, audio
decoding, the temporary WAV and parsing included) and whisper-cli with exactly
the argv kvscribe builds, on the original file. One untimed warm-up of each
first. Prints medians and the overhead ratio. Writes
benchmarks/results/whispercpp_overhead.json (every timed run's seconds) and
whispercpp_overhead.md (both command lines, the medians and the overhead).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import corpus
import results_file

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest

KVSCRIBE = Path(sys.executable).parent / "kvscribe"


def main() -> None:
    parser = argparse.ArgumentParser()
    default = corpus.CLIPS / "espeak_longform_en.wav"
    parser.add_argument("clip", nargs="?", type=Path, default=default)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default="cpu-laptop")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        direct, backend = _direct_argv(args.clip, args.profile, Path(work) / "out")
        ours = [str(KVSCRIBE), str(args.clip), "-b", "whispercpp", "-p", args.profile]
        ours += ["-f", "txt", "-q"]
        print("direct:  ", " ".join(direct))
        print("kvscribe:", " ".join(ours))
        times: dict[str, list[float]] = {"direct": [], "kvscribe": []}
        for round_ in range(args.repeat + 1):
            for name, argv in (("direct", direct), ("kvscribe", ours)):
                seconds = _timed(argv)
                if round_:  # round 0 warms the page cache and the converted model
                    times[name].append(seconds)
    direct_s, ours_s = (statistics.median(times[k]) for k in ("direct", "kvscribe"))
    overhead = ours_s / direct_s - 1
    summary = [
        f"runs: direct {times['direct']}, kvscribe {times['kvscribe']}",
        f"median wall: whisper-cli direct {direct_s:.2f} s, kvscribe {ours_s:.2f} s",
        f"overhead: {100 * overhead:+.1f} %",
    ]
    print("\n" + "\n".join(summary))
    audio_seconds = load_audio(args.clip).size / 16000
    rows = [
        {"run": "whisper-cli direct", "argv": direct, "runs_seconds": times["direct"]},
        {"run": "kvscribe", "argv": ours, "runs_seconds": times["kvscribe"]},
    ]
    table = [
        f"{args.clip.name}: {audio_seconds:.1f} s of audio, profile {args.profile}, "
        f"{args.repeat} timed runs each after one warm-up, interleaved, whole processes",
        "",
        f"- direct: `{shlex.join(direct)}`",
        f"- kvscribe: `{shlex.join(ours)}`",
        "",
        "| run | median s | min s | max s |",
        "|---|---|---|---|",
    ]
    for row in rows:
        values = row["runs_seconds"]
        row["median_seconds"] = statistics.median(values)
        table.append(
            f"| {row['run']} | {row['median_seconds']:.2f} | {min(values):.2f} | "
            f"{max(values):.2f} |"
        )
    table += ["", *summary]
    settings = backend.describe_settings()
    meta = {
        "device": "cpu",
        "backend": "whispercpp",
        "profile": args.profile,
        "model": backend.model.name,
        "beam_size": int(backend.settings.get("beam_size", 5)),
        "whisper_cli": settings.get("whisper-cli"),
        "settings": settings,
        "clip": args.clip.name,
        "audio_seconds": audio_seconds,
        "repeat": args.repeat,
        "timing": "wall clock of whole processes, interleaved, after one untimed warm-up each",
        "overhead": overhead,
    }
    results_file.write("whispercpp_overhead", meta, rows, "\n".join(table))


def _direct_argv(clip: Path, profile_name: str, out: Path):
    """The argv kvscribe itself would run, pointed at the original file, and the backend."""
    backend_cls = registry.get("whispercpp")
    backend = backend_cls(models.resolve(None, ("ggml",)), profile.load(profile_name), "cpu")
    backend.load()
    beams = int(backend.settings.get("beam_size", 5))
    return backend.argv_for(clip, out, DecodeRequest(), beams), backend


def _timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
