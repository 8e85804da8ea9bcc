"""What the batched path's segments look like next to the sequential path's, and how its
word times compare with faster-whisper's own word timestamps.

    .venv/bin/python benchmarks/longform_segments.py [--clips A,B]

For each long clip: kvscribe's default (ctranslate2, batch 8: text decoded without
timestamps, times from alignment) and `--batch-size 1` (sequential, Whisper's timestamp
tokens), each run as `kvscribe CLIP -f json,srt --word-timestamps`. Per run: segment
count, median and longest segment seconds, whether the SRT parses (numbered cues in
order, well-formed times, start <= end, cues not going back in time). Word times: the
batched run's words against faster-whisper's `transcribe(word_timestamps=True)` on the
same model files, paired by an alignment of the normalised word sequences; the median and
95th percentile of |start difference| and |end difference| over the paired words.
Writes benchmarks/results/longform_segments.json and .md.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import results_file

from kvscribe import models

HERE = Path(__file__).resolve().parent
EVAL = HERE.parent / "eval"
KVSCRIBE = str(Path(sys.executable).parent / "kvscribe")
CLIPS = {
    "espeak_longform_en": EVAL / "clips" / "espeak_longform_en.wav",
    "asterisk_en_ivr_dev": EVAL / "realform" / "asterisk_en_ivr_dev.wav",
    "joined_real": EVAL / "clips_joined" / "joined_real.wav",
}
RUNS = {"default (batch 8)": [], "--batch-size 1": ["--batch-size", "1"]}
SRT_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d),(\d\d\d) --> (\d\d):(\d\d):(\d\d),(\d\d\d)$")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clips", default=",".join(CLIPS))
    args = parser.parse_args()
    rows, word_rows = [], []
    for name in args.clips.split(","):
        words_by_run = {}
        for run, flags in RUNS.items():
            segments, srt_ok = _kvscribe(CLIPS[name], flags)
            lengths = [s["end"] - s["start"] for s in segments]
            rows.append(
                {
                    "clip": name,
                    "run": run,
                    "segments": len(segments),
                    "median_seconds": statistics.median(lengths),
                    "max_seconds": max(lengths),
                    "srt_parses": srt_ok,
                }
            )
            words_by_run[run] = [w for s in segments for w in s.get("words", [])]
        reference = _faster_whisper_words(CLIPS[name])
        word_rows.append(
            {"clip": name, **_word_differences(words_by_run["default (batch 8)"], reference)}
        )
    lines = _report(rows, word_rows)
    print("\n".join(lines))
    meta = {
        "model": "tiny.en",
        "device": "cpu",
        "runs": {
            run: f"kvscribe CLIP -f json,srt --word-timestamps {' '.join(f)}".strip()
            for run, f in RUNS.items()
        },
        "reference_words": "faster_whisper.WhisperModel(int8, cpu_threads=2)"
        ".transcribe(beam_size=5, word_timestamps=True)",
        "word_rows": word_rows,
    }
    results_file.write("longform_segments", meta, rows, "\n".join(lines))


def _kvscribe(clip: Path, flags: list[str]) -> tuple[list[dict], bool]:
    with tempfile.TemporaryDirectory() as out:
        command = [KVSCRIBE, str(clip), "-f", "json,srt", "--word-timestamps", "-q"]
        subprocess.run([*command, "-o", out, *flags], check=True)
        stem = Path(out) / clip.stem
        segments = json.loads(stem.with_suffix(".json").read_text())["segments"]
        return segments, _srt_parses(stem.with_suffix(".srt").read_text())


def _srt_parses(text: str) -> bool:
    """Numbered cues 1, 2, ... each with a well-formed time line, start <= end, starts
    not going back in time, and text."""
    previous_start = -1.0
    for number, block in enumerate(text.strip().split("\n\n"), start=1):
        lines = block.split("\n")
        match = SRT_TIME.match(lines[1]) if len(lines) >= 3 else None
        if lines[0] != str(number) or match is None:
            return False
        parts = [int(p) for p in match.groups()]
        start = parts[0] * 3600 + parts[1] * 60 + parts[2] + parts[3] / 1000
        end = parts[4] * 3600 + parts[5] * 60 + parts[6] + parts[7] / 1000
        if end < start or start < previous_start or not "".join(lines[2:]).strip():
            return False
        previous_start = start
    return True


def _faster_whisper_words(clip: Path) -> list[dict]:
    from faster_whisper import WhisperModel

    path = models.resolve("tiny.en", ("ctranslate2",)).path
    model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=2)
    segments, _ = model.transcribe(str(clip), beam_size=5, word_timestamps=True)
    return [{"word": w.word, "start": w.start, "end": w.end} for s in segments for w in s.words]


def _norm(word: str) -> str:
    return re.sub(r"[^a-z0-9']", "", word.lower())


def _word_differences(ours: list[dict], theirs: list[dict]) -> dict:
    """Median and p95 of |start| and |end| differences over the words both runs wrote in
    the same place (difflib's matching blocks over the normalised words)."""
    a, b = [_norm(w["word"]) for w in ours], [_norm(w["word"]) for w in theirs]
    pairs = [
        (ours[block.a + k], theirs[block.b + k])
        for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
        for k in range(block.size)
    ]
    starts = sorted(abs(x["start"] - y["start"]) for x, y in pairs)
    ends = sorted(abs(x["end"] - y["end"]) for x, y in pairs)
    return {
        "paired_words": len(pairs),
        "our_words": len(ours),
        "their_words": len(theirs),
        "start_median": statistics.median(starts),
        "start_p95": starts[int(0.95 * (len(starts) - 1))],
        "end_median": statistics.median(ends),
        "end_p95": ends[int(0.95 * (len(ends) - 1))],
    }


def _report(rows: list[dict], word_rows: list[dict]) -> list[str]:
    lines = [
        "Segments of kvscribe's batched default against its sequential path (tiny.en, cpu):",
        "",
        "| clip | run | segments | median s | longest s | SRT parses |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['clip']} | {r['run']} | {r['segments']} | {r['median_seconds']:.2f} "
            f"| {r['max_seconds']:.2f} | {'yes' if r['srt_parses'] else 'NO'} |"
        )
    lines += [
        "",
        "Word times of the batched default against faster-whisper's own word timestamps "
        "(sequential, beam 5), over the words both wrote in the same place (seconds):",
        "",
        "| clip | paired words (ours / theirs) | start median | start p95 | end median | end p95 |",
        "|---|---|---|---|---|---|",
    ]
    for w in word_rows:
        lines.append(
            f"| {w['clip']} | {w['paired_words']} ({w['our_words']} / {w['their_words']}) "
            f"| {w['start_median']:.3f} | {w['start_p95']:.3f} | {w['end_median']:.3f} "
            f"| {w['end_p95']:.3f} |"
        )
    return lines


if __name__ == "__main__":
    main()
