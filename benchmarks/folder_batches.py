"""Folders of short files into an output folder: short files sharing batches against
decoding them one file at a time, with --jobs 1 and --jobs 2 and kvscribe's default.

    .venv/bin/python benchmarks/folder_batches.py [--copies 3] [--repeat 3]
        [--backend NAME --out folder_batches_NAME]

Two folders:
- every clip of eval/clips of 30 s or less (real and synthetic speech), `--copies` times;
- the realform English telephone recording (eval/realform/asterisk_en_ivr_dev.wav) cut
  into its utterances (kvscribe's chunker: cuts at pauses of 1 s or more, pieces of at most
  30 s), one file each; its WER is of the pieces' texts joined in order.

One file at a time is `--batch-size 1`: with it no file shares a batch, and a file of 30 s
or less is decoded exactly as before files shared batches (a short file never had chunks
to batch). Whole `kvscribe` processes as a user runs them, interleaved (the order rotates
each repeat), each into an empty output folder; medians of `--repeat`.

Then why a worker with one core decodes its files one at a time: one worker in this
process with one thread, the same files shared and alone (Worker.work_parcel).

Writes benchmarks/results/folder_batches.{json,md} (`--out`: another name), for
kvscribe's default backend unless `--backend` names another.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import corpus
import results_file

from kvscribe import profile as profiles
from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.bench.wer import pooled_wer
from kvscribe.machine import hardware

KVSCRIBE = Path(sys.executable).parent / "kvscribe"
REALFORM = corpus.CLIPS.parent / "realform" / "asterisk_en_ivr_dev.wav"
CONFIGS = {
    "kvscribe's default (no --jobs)": [],
    "--jobs 1 (files share batches)": ["--jobs", "1"],
    "--jobs 1 --batch-size 1 (one file at a time)": ["--jobs", "1", "--batch-size", "1"],
    "--jobs 2 --batch-size 1 (one file at a time)": ["--jobs", "2", "--batch-size", "1"],
}


@dataclass
class Folder:
    name: str
    root: Path
    files: list[Path]  # in the order their texts are read
    references: list[str]  # one per file, or one for the files joined

    def wer(self, out: Path) -> float:
        texts = [
            (out / file.relative_to(self.root)).with_suffix(".txt").read_text(encoding="utf-8")
            for file in self.files
        ]
        if len(self.references) == 1:
            texts = [" ".join(texts)]
        return pooled_wer(list(zip(self.references, texts, strict=True)))

    @property
    def audio_seconds(self) -> float:
        return sum(load_audio(file).size for file in self.files) / SAMPLE_RATE


def eval_clips(root: Path, copies: int) -> Folder:
    clips = [
        c for c in sorted(corpus.CLIPS.glob("*.wav")) if load_audio(c).size <= 30 * SAMPLE_RATE
    ]
    files, references = [], []
    for copy in range(copies):
        (root / f"set{copy}").mkdir(parents=True)
        for clip in clips:
            files.append(Path(shutil.copy(clip, root / f"set{copy}" / clip.name)))
            references.append(clip.with_suffix(".txt").read_text(encoding="utf-8"))
    return Folder(f"eval clips of 30 s or less, {copies} copies", root, files, references)


def realform_utterances(root: Path) -> Folder:
    from kvscribe.chunking import ChunkRules, speech_chunks

    sys.path.insert(0, str(corpus.CLIPS.parent.parent))  # the repository: tests/media.py
    from tests import media

    root.mkdir(parents=True)
    audio = load_audio(REALFORM)
    files = []
    for number, chunk in enumerate(speech_chunks(audio, ChunkRules(max_gap=1.0))):
        files.append(root / f"{number:03d}.wav")
        media.write_wav(files[-1], audio[chunk.start : chunk.end])
    reference = REALFORM.with_suffix(".txt").read_text(encoding="utf-8")
    return Folder(f"{REALFORM.name} cut at its pauses", root, files, [reference])


def run_once(folder: Folder, out: Path, flags: list[str], args) -> float:
    shutil.rmtree(out, ignore_errors=True)
    argv = [KVSCRIBE, folder.root, "--recursive", "-o", out, "-f", "txt", "-q"]
    argv += ["-p", args.profile, "--backend", args.backend]
    started = time.perf_counter()
    done = subprocess.run([str(a) for a in [*argv, *flags]], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stderr}")
    return seconds


def measure(folder: Folder, work: Path, args) -> list[dict]:
    names = list(CONFIGS)
    times: dict[str, list[float]] = {name: [] for name in names}
    wers: dict[str, float] = {}
    for turn in range(args.repeat):
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            out = work / "out"
            times[name].append(run_once(folder, out, CONFIGS[name], args))
            wers[name] = folder.wer(out)
            print(f"{folder.name} | {name}: {times[name][-1]:.2f} s, WER {wers[name]:.3f}")
    audio = folder.audio_seconds
    alone = {
        jobs: statistics.median(times[f"--jobs {jobs} --batch-size 1 (one file at a time)"])
        for jobs in (1, 2)
    }
    return [
        {
            "folder": folder.name,
            "files": len(folder.files),
            "audio_seconds": audio,
            "run": name,
            "flags": CONFIGS[name],
            "seconds": times[name],
            "median_seconds": statistics.median(times[name]),
            "x_real_time": audio / statistics.median(times[name]),
            "x_one_at_a_time_jobs_1": statistics.median(times[name]) / alone[1],
            "x_one_at_a_time_jobs_2": statistics.median(times[name]) / alone[2],
            "wer": wers[name],
        }
        for name in names
    ]


def one_core(folder: Folder, args) -> list[dict]:
    """One worker with one thread, in this process: the files shared, then alone."""
    from kvscribe.batch import Task
    from kvscribe.batch.executors import parcels
    from kvscribe.batch.worker import Worker
    from kvscribe.options import TranscribeOptions

    options = TranscribeOptions(
        inputs=(folder.root,),
        output_dir=folder.root / "out",
        profile=args.profile,
        backend=args.backend,
        threads=1,
    )
    worker = Worker(options)
    backend = worker.runner.backend
    tasks = [Task(file, file.stem, None) for file in folder.files]
    rows = []
    for shared in (True, False):
        backend.shares_batches = lambda request, shared=shared: shared
        started = time.perf_counter()
        for parcel in parcels(tasks, options, 1, shared=True):
            worker.work_parcel(parcel)
        seconds = time.perf_counter() - started
        run = "shared" if shared else "one file at a time"
        print(f"{folder.name} | one worker, 1 thread, {run}: {seconds:.2f} s")
        rows.append({"folder": folder.name, "run": f"1 thread, {run}", "seconds": seconds})
    del backend.shares_batches
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default="auto")
    parser.add_argument("--backend", default="ctranslate2")
    parser.add_argument("--out", default="folder_batches", help="results file name")
    args = parser.parse_args()
    os.environ.pop("OMP_NUM_THREADS", None)  # every process picks its own threads
    with tempfile.TemporaryDirectory() as work:
        folders = [
            eval_clips(Path(work) / "clips", args.copies),
            realform_utterances(Path(work) / "realform"),
        ]
        design = [row for folder in folders for row in one_core(folder, args)]
        rows = [row for folder in folders for row in measure(folder, Path(work), args)]
    table = _table(rows, design, args)
    print("\n" + table)
    profile = profiles.load(args.profile)
    meta = {
        "device": profiles.pick_device(profile, None, hardware.detect()),
        "backend": args.backend
        + (" (kvscribe's default)" if args.backend == "ctranslate2" else ""),
        "profile": args.profile,
        "model": "tiny.en (kvscribe's default)",
        "copies": args.copies,
        "timing": "wall clock of each whole `kvscribe` process, interleaved; median of "
        f"{args.repeat}. One-core rows: one Worker in the benchmark's process, one pass",
        "one_core": design,
    }
    results_file.write(args.out, meta, rows, table)


def _table(rows: list[dict], design: list[dict], args) -> str:
    lines = [
        f"`-p {args.profile}`, `-f txt`; whole processes, median of {args.repeat} "
        "interleaved runs. WER pooled (the realform pieces: their texts joined in order).",
    ]
    for folder in dict.fromkeys(row["folder"] for row in rows):
        mine = [row for row in rows if row["folder"] == folder]
        lines += [
            "",
            f"**{folder}**: {mine[0]['files']} files, {mine[0]['audio_seconds']:.0f} s of audio",
            "",
            "| run | wall (s) | x real time | x `--jobs 1 --batch-size 1` | "
            "x `--jobs 2 --batch-size 1` | WER |",
            "|---|---|---|---|---|---|",
        ]
        for row in mine:
            lines.append(
                f"| {row['run']} | {row['median_seconds']:.2f} | {row['x_real_time']:.1f} | "
                f"{row['x_one_at_a_time_jobs_1']:.2f} | {row['x_one_at_a_time_jobs_2']:.2f} | "
                f"{row['wer']:.3f} |"
            )
    lines += [
        "",
        "One worker with one thread (in the benchmark's process, one pass), the same files:",
        "",
        "| folder | run | seconds |",
        "|---|---|---|",
    ]
    lines += [f"| {row['folder']} | {row['run']} | {row['seconds']:.2f} |" for row in design]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
