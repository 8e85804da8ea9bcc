"""A folder of the eval's short clips, transcribed into an output folder: short files
sharing batches (kvscribe's default) against decoding them one file at a time, each with
--jobs 1 and --jobs 2, and kvscribe's default number of workers.

    .venv/bin/python benchmarks/folder_batches.py [--copies 3] [--repeat 3]

The folder holds every clip of eval/clips under 30 s (real and synthetic speech),
`--copies` times under numbered subfolders. One file at a time is `--batch-size 1`: with
it no file shares a batch, and a file of 30 s or less is decoded alone exactly as it was
before files shared batches (a short file never had chunks to batch). Whole `kvscribe`
processes as a user runs them, interleaved (the order rotates each repeat), each into an
empty output folder; medians of `--repeat`. Also the pooled WER of each run's txt
outputs against the references. Writes benchmarks/results/folder_batches.{json,md}.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import corpus
import results_file

from kvscribe import hardware
from kvscribe import profile as profiles
from kvscribe.audio import load_audio
from kvscribe.bench.wer import pooled_wer

KVSCRIBE = Path(sys.executable).parent / "kvscribe"
CONFIGS = {
    "kvscribe's default (no --jobs)": [],
    "shared batches, --jobs 1": ["--jobs", "1"],
    "shared batches, --jobs 2": ["--jobs", "2"],
    "one file at a time, --jobs 1": ["--jobs", "1", "--batch-size", "1"],
    "one file at a time, --jobs 2": ["--jobs", "2", "--batch-size", "1"],
}


def short_clips() -> list[Path]:
    return [
        clip for clip in sorted(corpus.CLIPS.glob("*.wav")) if load_audio(clip).size <= 30 * 16000
    ]


def build_folder(clips: list[Path], root: Path, copies: int) -> None:
    for copy in range(copies):
        folder = root / f"set{copy}"
        folder.mkdir(parents=True)
        for clip in clips:
            shutil.copy(clip, folder / clip.name)


def run_once(root: Path, out: Path, flags: list[str], profile: str) -> float:
    shutil.rmtree(out, ignore_errors=True)
    argv = [KVSCRIBE, root, "--recursive", "-o", out, "-f", "txt", "-p", profile, "-q", *flags]
    started = time.perf_counter()
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stderr}")
    return seconds


def folder_wer(out: Path, clips: list[Path], copies: int) -> float:
    pairs = []
    for copy in range(copies):
        for clip in clips:
            text = (out / f"set{copy}" / f"{clip.stem}.txt").read_text(encoding="utf-8")
            pairs.append((clip.with_suffix(".txt").read_text(encoding="utf-8"), text))
    return pooled_wer(pairs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default="auto")
    args = parser.parse_args()
    clips = short_clips()
    names = list(CONFIGS)
    times: dict[str, list[float]] = {name: [] for name in names}
    wers: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as work:
        root = Path(work) / "clips"
        build_folder(clips, root, args.copies)
        for turn in range(args.repeat):
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                out = Path(work) / "out"
                seconds = run_once(root, out, CONFIGS[name], args.profile)
                times[name].append(seconds)
                wers[name] = folder_wer(out, clips, args.copies)
                print(f"{name}: {seconds:.2f} s, WER {wers[name]:.3f}", flush=True)
    audio = args.copies * sum(load_audio(clip).size for clip in clips) / 16000
    baseline = {
        jobs: statistics.median(times[f"one file at a time, --jobs {jobs}"]) for jobs in (1, 2)
    }
    rows = []
    for name in names:
        median = statistics.median(times[name])
        rows.append(
            {
                "run": name,
                "flags": CONFIGS[name],
                "seconds": times[name],
                "median_seconds": median,
                "x_real_time": audio / median,
                "x_one_at_a_time_jobs_1": median / baseline[1],
                "x_one_at_a_time_jobs_2": median / baseline[2],
                "wer": wers[name],
            }
        )
    table = _table(rows, len(clips) * args.copies, audio, args)
    print("\n" + table)
    profile = profiles.load(args.profile)
    meta = {
        "device": profiles.pick_device(profile, None, hardware.detect()),
        "backend": "ctranslate2 (kvscribe's default)",
        "profile": args.profile,
        "model": "tiny.en (kvscribe's default)",
        "clips": [clip.name for clip in clips],
        "copies": args.copies,
        "files": len(clips) * args.copies,
        "audio_seconds": audio,
        "timing": "wall clock of each whole `kvscribe` process, interleaved; median of "
        f"{args.repeat}",
    }
    results_file.write("folder_batches", meta, rows, table)


def _table(rows: list[dict], files: int, audio: float, args) -> str:
    lines = [
        f"{files} files ({audio:.0f} s of audio): the {files // args.copies} eval clips of "
        f"30 s or less, {args.copies} copies; `-p {args.profile}`, `-f txt`; median of "
        f"{args.repeat} interleaved runs",
        "",
        "| run | wall (s) | x real time | x one at a time, --jobs 1 | x one at a time, "
        "--jobs 2 | WER |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['run']} | {row['median_seconds']:.2f} | {row['x_real_time']:.1f} | "
            f"{row['x_one_at_a_time_jobs_1']:.2f} | {row['x_one_at_a_time_jobs_2']:.2f} | "
            f"{row['wer']:.3f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
