"""The batch acceptance run: 40 files (the eval clips repeated under nested folders, plus
5 bad ones), --jobs 1 vs --jobs 2, a rerun, and kill -9 halfway + rerun.

    .venv/bin/python benchmarks/batch_folders.py [CLIPS_DIR] [--profile NAME]

Prints wall times, throughput, and whether the killed-and-resumed output tree is
byte-identical to an uninterrupted one (same --jobs), then the README's table. Writes
benchmarks/results/batch_folders.json (per run: exit code, seconds, audio seconds, events,
the one-line errors) and batch_folders.md (the table).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import corpus
import results_file

from kvscribe import profile as profiles
from kvscribe.machine import hardware

KVSCRIBE = Path(sys.executable).parent / "kvscribe"
BAD = {
    "empty.wav": b"",
    "notes.wav": b"Minutes of the meeting.\n" * 40,
    "header_only.wav": None,  # filled from a real clip
    "truncated.wav": None,
    "cover.mp3": b"\xff\xfb" + os.urandom(4000),
}


def build_tree(clips: list[Path], root: Path) -> int:
    """35 good files in nested folders, 5 bad ones; returns the good count."""
    folders = ["2024/jan", "2024/feb/interviews", "2025/misc"]
    good = 0
    for index in range(35):
        clip = clips[index % len(clips)]
        target = root / folders[index % len(folders)] / f"{index:02d} {clip.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(clip, target)
        good += 1
    raw = clips[0].read_bytes()
    bad_dir = root / "2025" / "broken"
    bad_dir.mkdir(parents=True, exist_ok=True)
    for name, data in BAD.items():
        if name == "header_only.wav":
            data = raw[:44]
        elif name == "truncated.wav":
            data = raw[: len(raw) // 2]
        (bad_dir / name).write_bytes(data)
    return good


def run(argv: list, **kwargs) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kwargs)
    return time.perf_counter() - started, done


def outputs(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".kvscribe" not in p.parts
    }


def _audio_seconds(out: Path) -> float:
    lines = (out / ".kvscribe" / "manifest.jsonl").read_text().splitlines()
    return sum(json.loads(line)["audio_seconds"] for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    default = corpus.CLIPS
    parser.add_argument("clips", nargs="?", type=Path, default=default)
    parser.add_argument("--profile", default="auto")
    args = parser.parse_args()
    clips = sorted(args.clips.glob("*.wav"))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        root = Path(work) / "recordings"
        good = build_tree(clips, root)
        common = [KVSCRIBE, root, "--recursive", "-f", "srt,txt", "-p", args.profile, "-q"]
        for jobs in (1, 2):
            out = Path(work) / f"out-jobs{jobs}"
            seconds, done = run([*common, "-o", out, "--jobs", jobs, "--json"])
            events = [json.loads(line) for line in done.stdout.splitlines()]
            finished = sum(1 for e in events if e["event"] == "done")
            errors = [line for line in done.stderr.splitlines() if "error:" in line]
            audio = _audio_seconds(out)
            files = len(outputs(out))
            print(
                f"--jobs {jobs}: exit {done.returncode}, {seconds:.1f} s for {audio:.0f} s of "
                f"audio ({audio / seconds:.1f}x real time), {finished} done, "
                f"{len(errors)} one-line errors, {files} output files"
            )
            rows.append(
                {
                    "run": f"--jobs {jobs}",
                    "exit": done.returncode,
                    "seconds": seconds,
                    "audio_seconds": audio,
                    "x_real_time": audio / seconds,
                    "done": finished,
                    "failed": sum(e["event"] == "failed" for e in events),
                    "one_line_errors": errors,
                    "output_files": files,
                }
            )
        seconds, again = run([*common, "-o", Path(work) / "out-jobs2", "--jobs", 2, "--json"])
        events = [json.loads(line) for line in again.stdout.splitlines()]
        kinds = sorted({e["event"] for e in events})
        failed = sum(e["event"] == "failed" for e in events)
        print(f"rerun: exit {again.returncode}, {seconds:.1f} s, events {kinds}, {failed} failures")
        rows.append(
            {
                "run": "rerun (--jobs 2)",
                "exit": again.returncode,
                "seconds": seconds,
                "events": {kind: sum(e["event"] == kind for e in events) for kind in kinds},
                "failed": failed,
            }
        )
        killed = Path(work) / "out-killed"
        proc = subprocess.Popen(
            [str(a) for a in [*common, "-o", killed, "--jobs", 2]],
            start_new_session=True,
            stderr=subprocess.DEVNULL,
        )
        manifest = killed / ".kvscribe" / "manifest.jsonl"
        while not manifest.exists() or len(manifest.read_text().splitlines()) < (good + 5) // 2:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        at_kill = len(manifest.read_text().splitlines())
        seconds, resumed = run([*common, "-o", killed, "--jobs", 2])
        same = outputs(killed) == outputs(Path(work) / "out-jobs2")
        print(
            f"kill -9 after {at_kill} records, rerun exit {resumed.returncode} in {seconds:.1f} s: "
            f"byte-identical to the uninterrupted --jobs 2 run: {same}"
        )
        rows.append(
            {
                "run": "kill -9, rerun (--jobs 2)",
                "records_at_kill": at_kill,
                "inputs": good + len(BAD),
                "exit": resumed.returncode,
                "seconds": seconds,
                "byte_identical": same,
            }
        )
    table = _table(rows, good, args.profile)
    print("\n" + table)
    profile = profiles.load(args.profile)
    meta = {
        "device": profiles.pick_device(profile, None, hardware.detect()),
        "backend": "ctranslate2 (kvscribe's default)",
        "profile": args.profile,
        "profile_resolved": f"{profile.name} ({profile.chosen_by})"
        if profile.chosen_by
        else profile.name,
        "model": "tiny.en (kvscribe's default)",
        "clips_dir": str(args.clips),
        "inputs": {"good": good, "bad": sorted(BAD)},
        "timing": "wall clock of each whole `kvscribe` batch process",
    }
    results_file.write("batch_folders", meta, rows, table)


def _table(rows: list[dict], good: int, profile: str) -> str:
    jobs1, jobs2, rerun, killed = rows
    lines = [
        f"{good + len(BAD)} files: {good} good ({jobs1['audio_seconds']:.0f} s of audio) in "
        f"nested folders, {len(BAD)} bad; `-p {profile}`",
        "",
        "| run | wall (s) | throughput (x real time) | result |",
        "|---|---|---|---|",
    ]
    for row in (jobs1, jobs2):
        lines.append(
            f"| `{row['run']}` | {row['seconds']:.1f} | {row['x_real_time']:.1f} | "
            f"{row['done']} done ({row['output_files']} files), "
            f"{len(row['one_line_errors'])} one-line errors, exit {row['exit']} |"
        )
    redone = rerun["events"].get("done", 0)
    lines.append(
        f"| rerun | {rerun['seconds']:.1f} | - | {redone} redone, {rerun['failed']} failures "
        f"listed (events: {', '.join(rerun['events'])}), exit {rerun['exit']} |"
    )
    lines.append(
        f"| kill -9 after {killed['records_at_kill']} of {killed['inputs']} records, rerun | "
        f"{killed['seconds']:.1f} | - | byte-identical to the uninterrupted `--jobs 2` tree: "
        f"{killed['byte_identical']}, exit {killed['exit']} |"
    )
    speedup = jobs1["seconds"] / jobs2["seconds"] - 1
    lines += ["", f"`--jobs 2` vs `--jobs 1`: {100 * speedup:+.0f} % throughput"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
