"""How long a whisper-cli piece may be: its peak RSS against input length, and what a
piece costs (backends/whispercpp/pieces.py).

    .venv/bin/python benchmarks/whispercpp_pieces.py [--minutes 1,2,...] [--models tiny.en,base]
        [--end-to-end MINUTES]

- memory: whisper-cli at the cpu-laptop profile's [whispercpp] settings (the argv the
  backend builds: beam 5, flash attention, F16 caches) on float WAVs of the eval clips
  joined back to back (0.5 s apart) and repeated to each length, with `-d 10000`: it still
  reads the whole WAV and computes the whole input's log-mel before decoding (the part
  that grows with the length) but decodes only the first 10 s, whose memory does not
  depend on the length; and at a few lengths the full decode, whose peak also holds the
  decoder's compute buffer as far as the previous-text context (-mc -1) has filled it.
  Peak RSS from wait4.
- per-piece cost: whisper-cli on 1 s of samples/jfk.wav (process start, model load, one
  window), median of 3, and whisper.cpp's own "load time".
- end to end (--end-to-end MINUTES, tiny.en, greedy and beam 5): the backend on such an
  input run whole (KVSCRIBE_WHISPER_PIECE_SECONDS=0) and in pieces: seconds, windows,
  the largest run's peak RSS, WER against the clips' references joined the same way.

Writes benchmarks/results/whispercpp_pieces.json and .md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import corpus
import numpy as np
import results_file

from kvscribe import models, profile, registry
from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.backends.whispercpp.pieces import PIECE_ENV, PIECE_SECONDS
from kvscribe.backends.whispercpp.process import WhisperProcess, check_outcome, write_wav_f32
from kvscribe.backends.whispercpp.report import parse_stderr
from kvscribe.bench.wer import pooled_wer
from kvscribe.contract import DecodeRequest

ROOT = Path(__file__).resolve().parents[1]
CLIPS = corpus.CLIPS
JFK = ROOT / "samples" / "jfk.wav"
GAP = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)


def backend_for(model: str):
    base = profile.load("cpu-laptop")
    backend = registry.get("whispercpp")(models.resolve(model, ("ggml",)), base, "cpu")
    backend.load()
    return backend


def joined_clips() -> tuple[np.ndarray, str]:
    """Every eval clip, 0.5 s apart, and their references in the same order."""
    audio, texts = [], []
    for wav in sorted(CLIPS.glob("*.wav")):
        audio += [load_audio(wav), GAP]
        texts.append(wav.with_suffix(".txt").read_text(encoding="utf-8").strip())
    return np.concatenate(audio), " ".join(texts)


def of_length(one: np.ndarray, minutes: float) -> np.ndarray:
    need = int(minutes * 60 * SAMPLE_RATE)
    return np.tile(one, -(-need // one.size))[:need]


def run_cli(argv: list[str], work: Path):
    started = time.perf_counter()
    proc = WhisperProcess(argv, work / "stderr.txt", None)
    list(proc.stdout_lines())
    outcome = proc.finish()
    check_outcome(outcome, argv[0], Path(argv[2]))
    return time.perf_counter() - started, outcome


def memory_rows(
    model: str, one: np.ndarray, minutes: list[float], full: list[float], work: Path
) -> list[dict]:
    """Peak RSS per length: reading and log-mel only (`-d 10000`) at every length, and a
    full decode at the lengths in `full`."""
    backend = backend_for(model)
    rows = []
    for length in sorted(set(minutes) | set(full)):
        wav = work / "input.wav"
        write_wav_f32(wav, of_length(one, length))
        argv = backend.argv_for(wav, work / "out", DecodeRequest(), 5)
        row = {"table": "memory", "model": model, "minutes": length}
        for kind, extra in (("mel_only", ["-d", "10000"]), ("full", [])):
            if length in (minutes if kind == "mel_only" else full):
                seconds, outcome = run_cli([*argv, *extra], work)
                row[f"{kind}_peak_rss_mb"] = round(outcome.peak_rss_bytes / 1e6, 1)
                row[f"{kind}_seconds"] = round(seconds, 2)
        rows.append(row)
        print(row, flush=True)
    return rows


def cost_row(model: str, work: Path) -> dict:
    backend = backend_for(model)
    wav = work / "one_second.wav"
    write_wav_f32(wav, load_audio(JFK)[:SAMPLE_RATE])
    argv = backend.argv_for(wav, work / "out", DecodeRequest(), 5)
    runs = [run_cli(argv, work) for _ in range(3)]
    loads = [parse_stderr(o.stderr).timings_ms.get("load", 0.0) for _, o in runs]
    row = {
        "table": "cost",
        "model": model,
        "run_seconds": round(statistics.median(s for s, _ in runs), 2),
        "load_ms": round(statistics.median(loads), 1),
    }
    print(row, flush=True)
    return row


def end_to_end_rows(minutes: float, one: np.ndarray, reference: str) -> list[dict]:
    backend = backend_for("tiny.en")
    audio = of_length(one, minutes)
    repeats = -(-audio.size // one.size)
    truth = " ".join([reference] * repeats)  # the last repeat is cut short: WER counts it
    rows = []
    for beams in (1, 5):
        for label, value in (("whole", "0"), ("pieces", None)):
            if value is None:
                os.environ.pop(PIECE_ENV, None)
            else:
                os.environ[PIECE_ENV] = value
            started = time.perf_counter()
            run = backend.transcribe(audio, DecodeRequest(beam_size=beams))
            text = " ".join(s.text for s in run.segments)
            rows.append(
                {
                    "table": "end to end",
                    "model": "tiny.en",
                    "beams": beams,
                    "minutes": minutes,
                    "runs": label,
                    "pieces": run.report.settings.get("pieces", "1 whisper-cli run"),
                    "seconds": round(time.perf_counter() - started, 1),
                    "windows": run.report.windows,
                    "peak_rss_mb": round((run.report.engine_peak_rss_bytes or 0) / 1e6, 1),
                    "wer": round(pooled_wer([(truth, text)]), 4),
                }
            )
            print(rows[-1], flush=True)
    os.environ.pop(PIECE_ENV, None)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "## whisper-cli peak RSS against input length",
        "",
        "cpu-laptop's [whispercpp] flags (beam 5, flash attention, F16 caches, -mc -1). "
        "`-d 10000`: the whole input is read and its log-mel computed, 10 s decoded (what "
        "grows with the length); full decode: all of it, previous text carried.",
        "",
        "| model | minutes | peak RSS MB, read + log-mel (`-d 10000`) | peak RSS MB, full decode |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['minutes']:g} | {r.get('mel_only_peak_rss_mb', '')} | "
        f"{r.get('full_peak_rss_mb', '')} |"
        for r in rows
        if r["table"] == "memory"
    ]
    lines += [
        "",
        f"Piece length chosen: {PIECE_SECONDS:g} s.",
        "",
        "## What one more whisper-cli run costs",
        "",
        "| model | wall seconds on 1 s of audio (median of 3) | whisper.cpp load time ms |",
        "|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['run_seconds']} | {r['load_ms']} |"
        for r in rows
        if r["table"] == "cost"
    ]
    ends = [r for r in rows if r["table"] == "end to end"]
    if ends:
        lines += [
            "",
            "## End to end (the backend, tiny.en, cpu-laptop's settings, one run each)",
            "",
            "| minutes | beams | runs | seconds | windows | largest run's peak RSS MB | WER |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['minutes']:g} | {r['beams']} | {r['pieces']} | {r['seconds']} | "
            f"{r['windows']} | {r['peak_rss_mb']} | {r['wer']} |"
            for r in ends
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", default="1,2,3,4,5,10,20,60")
    parser.add_argument("--full-minutes", default="1,2,4,10", help="lengths decoded fully")
    parser.add_argument("--models", default="tiny.en,base")
    parser.add_argument("--end-to-end", type=float, default=0.0)
    args = parser.parse_args()
    minutes = [float(m) for m in args.minutes.split(",")]
    full = [float(m) for m in args.full_minutes.split(",")]
    one, reference = joined_clips()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kvscribe-pieces-") as folder:
        work = Path(folder)
        for model in args.models.split(","):
            rows += memory_rows(model, one, minutes, full if model == "tiny.en" else full[:3], work)
            rows.append(cost_row(model, work))
    if args.end_to_end:
        rows += end_to_end_rows(args.end_to_end, one, reference)
    meta = {"piece_seconds": PIECE_SECONDS, "settings": "cpu-laptop [whispercpp]"}
    results_file.write("whispercpp_pieces", meta, rows, markdown(rows))


if __name__ == "__main__":
    main()
