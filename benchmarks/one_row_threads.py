"""One row's decoder calls on a single-thread CTranslate2 replica against the engine with
every thread (backends/ctranslate2/replicas.py, "One row").

    .venv/bin/python benchmarks/one_row_threads.py [--models tiny.en,base] [--repeat 3]

faster-whisper's sequential transcribe, and so `--batch-size 1` and every live-mode
decode, works on one row at a time: one window encoded, then a beam search over it, then
word alignment. Per model, on 10 s pieces of a realform recording (English for tiny.en,
French for base), in this process after a warm-up: each call timed on the engine with
every thread this process may use (`whole`) and on one of the single-thread replicas
(`replica`), and faster-whisper's whole `transcribe` of the piece (beam 5, word
timestamps, as live mode decodes a buffer) on the engine alone against kvscribe's
one-row engine (beam search on a replica, the rest on every thread). Medians over pieces and
repeats; the texts of the two transcribes are compared piece by piece.
Writes benchmarks/results/one_row_threads.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import results_file

from kvscribe import models
from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.backends.ctranslate2.replicas import replicas
from kvscribe.machine.capacity import usable_cores
from kvscribe.models.ct2_file import whisper_dims

REALFORM = Path(__file__).resolve().parent.parent / "eval" / "realform"
RECORDING = {"en": REALFORM / "asterisk_en_ivr_dev.wav", "fr": REALFORM / "asterisk_fr_ivr_dev.wav"}
STARTS = (20, 50, 90, 130, 160)  # seconds: pieces with speech in both recordings
PIECE = 10.0
CALLS = (
    "encode one window",
    "detect the language",
    "beam search (beam 5)",
    "align the words",
    "transcribe the piece",
)


def main() -> None:
    args = _arguments()
    threads = usable_cores()
    rows = []
    for name in args.models.split(","):
        language = "en" if name.endswith(".en") else "fr"
        rows += _measure(name, language, threads, args.repeat)
    table = _table(rows, threads)
    print(table)
    meta = {
        "device": "cpu",
        "threads": threads,
        "compute_type": "int8",
        "timing": "time.perf_counter() around each call, in one process, after a warm-up",
        "pieces": f"{len(STARTS)} pieces of {PIECE:g} s",
        "recordings": [path.name for path in RECORDING.values()],
    }
    results_file.write(args.out, meta, rows, table)


def _measure(name: str, language: str, threads: int, repeat: int) -> list[dict]:
    from faster_whisper import WhisperModel

    path = models.resolve(name, ("ctranslate2",)).path
    width = whisper_dims(path / "model.bin").n_text_state
    whole = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=threads)
    pool = replicas(whole, str(path), "cpu", "int8", threads, width)
    one_row = pool.one_row_engine if pool.one_row else _forced(pool)
    audio = load_audio(RECORDING[language])
    pieces = [audio[int(s * SAMPLE_RATE) : int((s + PIECE) * SAMPLE_RATE)] for s in STARTS]
    timings: dict[tuple[str, str], list[float]] = {}
    same = 0
    for run in range(repeat + 1):  # the first run warms up
        for piece in pieces:
            for engine, label in ((whole, "whole"), (pool.engine, "replica")):
                for call, seconds in _calls(engine, piece, language).items():
                    if run:
                        timings.setdefault((call, label), []).append(seconds)
            texts = []
            for engine, label in ((whole, "whole"), (one_row, "replica")):
                started = time.perf_counter()
                texts.append(_transcribe(engine, piece, language))
                if run:
                    key = ("transcribe the piece", label)
                    timings.setdefault(key, []).append(time.perf_counter() - started)
            same += run == 1 and texts[0] == texts[1]
    return [
        {
            "model": name,
            "decoder_width": width,
            "call": call,
            "engine": label,
            "median_s": statistics.median(values),
            "calls": len(values),
            "same_text_pieces": same,
            "pieces": len(pieces),
        }
        for (call, label), values in timings.items()
    ]


def _forced(pool):
    """The one-row engine for a model wider than kvscribe sends to a replica: measured all
    the same, to show what it would do."""
    import dataclasses

    return dataclasses.replace(pool, one_row=True).one_row_engine


def _calls(engine, piece: np.ndarray, language: str) -> dict[str, float]:
    """Each decoder call of one row, timed on `engine`."""
    import ctranslate2
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer

    model = engine.model
    tokenizer = Tokenizer(engine.hf_tokenizer, model.is_multilingual, "transcribe", language)
    features = pad_or_trim(engine.feature_extractor(piece))[None].astype(np.float32)
    timed = {}
    started = time.perf_counter()
    encoded = model.encode(ctranslate2.StorageView.from_array(features))
    timed["encode one window"] = time.perf_counter() - started
    if model.is_multilingual:
        started = time.perf_counter()
        model.detect_language(encoded)
        timed["detect the language"] = time.perf_counter() - started
    started = time.perf_counter()
    found = model.generate(encoded, [list(tokenizer.sot_sequence)], beam_size=5, max_length=160)
    timed["beam search (beam 5)"] = time.perf_counter() - started
    frames = int(PIECE * 100) // 2
    started = time.perf_counter()
    model.align(encoded, tokenizer.sot_sequence, [found[0].sequences_ids[0]], [frames])
    timed["align the words"] = time.perf_counter() - started
    return timed


def _transcribe(engine, piece: np.ndarray, language: str) -> str:
    segments, _ = engine.transcribe(
        piece,
        language=language,
        beam_size=5,
        word_timestamps=True,
        condition_on_previous_text=False,
    )
    return "".join(segment.text for segment in segments)


def _table(rows: list[dict], threads: int) -> str:
    lines = [
        f"One row's calls on the engine with all {threads} threads (whole) and on one "
        "single-thread replica; int8, in this process, medians in seconds. The transcribe "
        "row is faster-whisper's whole transcribe of a piece (beam 5, word timestamps) on "
        "the engine alone against kvscribe's one-row engine (beam search on a replica, the "
        "rest on every thread).",
        "",
        "| model (decoder width) | call | whole (s) | replica (s) | replica / whole |",
        "|---|---|---|---|---|",
    ]
    for model in dict.fromkeys(row["model"] for row in rows):
        for call in CALLS:
            found = {r["engine"]: r for r in rows if r["model"] == model and r["call"] == call}
            if not found:  # an English-only model detects no language
                continue
            whole, replica = found["whole"], found["replica"]
            lines.append(
                f"| {model} ({whole['decoder_width']}) | {call} | {whole['median_s']:.3f} | "
                f"{replica['median_s']:.3f} | {replica['median_s'] / whole['median_s']:.2f} |"
            )
        first = next(r for r in rows if r["model"] == model)
        lines.append(
            f"| {model} | same text, whole and one-row transcribe | "
            f"{first['same_text_pieces']} of {first['pieces']} pieces | | |"
        )
    return "\n".join(lines)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny.en,base")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default="one_row_threads")
    return parser.parse_args()


if __name__ == "__main__":
    main()
