"""whisper-cli's `-p N` (N processors, each decoding 1/N of the audio) against one processor.

    .venv/bin/python benchmarks/whispercpp_processors.py [CLIPS_DIR] [--rounds N] [--layouts PxT,..]

`-p N` cuts the audio into N equal parts at fixed points (no look at pauses) and decodes
them in N threads of `-t` threads each; it is whisper.cpp's only way to decode parts of
one input at once, so it is the whispercpp backend's candidate for `--batch-size`.
Compares `-p 1 -t 2` (one processor on 2 cores) with `-p 2 -t 1` (and with `--layouts`,
e.g. 1x2,2x1,2x2, others) at the cpu-laptop profile's [whispercpp]
settings (beam 5, flash attention, -mc -1) and greedy (beam 1, otherwise the same), with
exactly the argv the backend builds plus `-p N`, one whisper-cli child per run timed from
outside (model load included).

- long-form: the 182 s espeak clip, after one untimed warm-up per setting, `--rounds`
  rounds (default 3) of every setting in turn, the order rotated each round; medians.
- pooled: every eval clip once per setting, interleaved clip by clip; pooled WER (the
  project's kvscribe.bench.wer) and summed seconds. On a clip of a few seconds `-p N`
  cuts words apart, so the table also shows the pooled WER with `-p N` only on clips over
  30 s (where the backend could use it), the other clips taken from the `-p 1 -t 2` run
  of the same decoding.

- other long audio, one run per setting, for WER at other split points: the eval clips
  of 30 s or less joined back to back, and samples/jfk.wav 16 times.

Text is the `-ojf` JSON's (every part's segments). Writes
benchmarks/results/whispercpp_processors.json (every run: seconds, whisper.cpp's total
time, peak RSS, WER, text) and whispercpp_processors.md (the tables).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import corpus
import numpy as np
import results_file

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.backends.whispercpp.process import WhisperProcess, check_outcome, write_wav_f32
from kvscribe.backends.whispercpp.report import parse_stderr
from kvscribe.bench.wer import pooled_wer
from kvscribe.contract import DecodeRequest

LONGFORM = "espeak_longform_en.wav"
MODES = [("beam 5 (cpu-laptop)", 5), ("greedy", 1)]
BASELINE = (1, 2)  # (-p processors, -t threads per processor): whisper-cli's default on 2 cores
LONG_SECONDS = 30.0
JFK = Path(__file__).resolve().parents[1] / "samples" / "jfk.wav"


@dataclasses.dataclass(frozen=True)
class Setting:
    mode: str
    beams: int
    processors: int
    threads: int

    @property
    def key(self) -> str:
        return f"{self.mode}, -p {self.processors} -t {self.threads}"


def main() -> None:
    parser = argparse.ArgumentParser()
    default = corpus.CLIPS
    parser.add_argument("clips", nargs="?", type=Path, default=default)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default=None)
    parser.add_argument(
        "--layouts",
        default="1x2,2x1",
        help="PxT,...: -p P -t T each (1x2 is always run: the baseline); 2x2 puts 4 threads "
        "on 2 cores",
    )
    args = parser.parse_args()
    layouts = [BASELINE] + [
        (int(p), int(t)) for p, t in (x.split("x") for x in args.layouts.split(","))
    ]
    layouts = list(dict.fromkeys(layouts))
    model = models.resolve(args.model, ("ggml",))
    settings = [Setting(m, b, p, t) for m, b in MODES for p, t in layouts]
    backends = {s: _backend(model, s) for s in settings}
    paths = sorted(args.clips.glob("*.wav"))
    with tempfile.TemporaryDirectory(prefix="kvscribe-processors-") as tmp:
        work = Path(tmp)
        clips, short = [], []
        for path in paths:
            samples = load_audio(path)
            wav = work / path.name
            write_wav_f32(wav, samples)  # what the backend hands whisper-cli
            clips.append(
                (path.name, wav, samples.size / 16000, path.with_suffix(".txt").read_text())
            )
            if samples.size <= LONG_SECONDS * 16000:
                short.append((samples, clips[-1][3]))
        joined = _joined(work, "joined_short_clips.wav", short)
        jfk = load_audio(JFK)
        jfk_16 = _joined(work, "jfk_x16.wav", [(jfk, JFK.with_suffix(".txt").read_text())] * 16)
        long_clip = next(c for c in clips if c[0] == LONGFORM)
        print(f"long-form: {LONGFORM}, {long_clip[2]:.1f} s; warm-up", flush=True)
        for s in settings:
            _run(backends[s], s, long_clip, work)  # untimed: page cache, first-run effects
        long_runs: dict[Setting, list[dict]] = {s: [] for s in settings}
        for round_ in range(args.rounds):
            order = settings[round_ % len(settings) :] + settings[: round_ % len(settings)]
            for s in order:
                run = _run(backends[s], s, long_clip, work)
                run["round"] = round_ + 1
                long_runs[s].append(run)
                print(f"  round {round_ + 1} {s.key}: {run['seconds']:.2f} s", flush=True)
        print(f"pooled: {len(clips)} clips", flush=True)
        pooled_runs: dict[Setting, list[dict]] = {s: [] for s in settings}
        for clip in clips:
            for s in settings:
                pooled_runs[s].append(_run(backends[s], s, clip, work))
        print("other long audio: one run each", flush=True)
        other_runs: dict[Setting, list[dict]] = {s: [] for s in settings}
        for clip in (joined, jfk_16):
            for s in settings:
                other_runs[s].append(_run(backends[s], s, clip, work))
    rows = [_row(s, long_runs[s], pooled_runs, long_clip[2]) for s in settings]
    for row, s in zip(rows, settings, strict=True):
        row["other_long_runs"] = other_runs[s]
    markdown = _markdown(rows, long_clip, clips, args.rounds)
    for row in rows:
        _slim(row)
    print(markdown)
    meta = {
        "device": "cpu",
        "backend": "whispercpp (whisper-cli run directly with the backend's argv + -p N)",
        "profile": "cpu-laptop [whispercpp] (beam 5, flash attention, -mc -1); greedy = beam 1",
        "model": model.name,
        "whisper_cli": str(backends[settings[0]].cli.path),
        "clips_dir": str(args.clips),
        "clips": len(clips),
        "audio_seconds": sum(c[2] for c in clips),
        "longform_clip": LONGFORM,
        "longform_rounds": args.rounds,
        "timing": "seconds: one whisper-cli child per run, wall clock from outside (model "
        "load included); long-form: median of the rounds after an untimed warm-up, settings "
        "interleaved; pooled: one run per clip per setting, interleaved clip by clip",
    }
    results_file.write("whispercpp_processors", meta, rows, markdown)


def _backend(model, s: Setting):
    base = profile.load("cpu-laptop")
    section = {**base.settings_for("whispercpp"), "beam_size": s.beams, "threads": s.threads}
    custom = dataclasses.replace(base, backends={**base.backends, "whispercpp": section})
    backend = registry.get("whispercpp")(model, custom, "cpu")
    backend.load()
    return backend


def _joined(work: Path, name: str, parts: list) -> tuple:
    """One WAV of `parts` ((samples, reference) each) back to back, and its reference."""
    samples = np.concatenate([samples for samples, _ in parts])
    write_wav_f32(work / name, samples)
    text = " ".join(reference.strip() for _, reference in parts)
    return name, work / name, samples.size / 16000, text


def _run(backend, s: Setting, clip, work: Path) -> dict:
    name, wav, seconds, reference = clip
    out = work / "result"
    argv = [*backend.argv_for(wav, out, DecodeRequest(), s.beams), "-p", str(s.processors)]
    started = time.perf_counter()
    proc = WhisperProcess(argv, work / "stderr.txt", None)
    for _ in proc.stdout_lines():
        pass
    outcome = proc.finish()
    elapsed = time.perf_counter() - started
    check_outcome(outcome, argv[0], backend.model.path, wav)
    data = json.loads(out.with_suffix(".json").read_text(encoding="utf-8", errors="replace"))
    text = "".join(item["text"] for item in data.get("transcription", []))
    out.with_suffix(".json").unlink()
    ref = reference
    splits = [
        line.split(" - ", 1)[1].strip()
        for line in outcome.stderr.splitlines()
        if line.startswith("whisper_full_parallel: split ")
    ]
    return {
        "clip": name,
        "audio_seconds": seconds,
        "seconds": elapsed,
        "whisper_total_ms": parse_stderr(outcome.stderr).timings_ms.get("total"),
        "peak_rss_bytes": outcome.peak_rss_bytes,
        "wer": pooled_wer([(ref, text)]),
        "split_at": splits,
        "text": text,
        "reference": ref,
        "argv": argv,
    }


def _row(s: Setting, long_runs: list[dict], pooled_runs: dict, long_seconds: float) -> dict:
    mine = pooled_runs[s]
    base = pooled_runs[Setting(s.mode, s.beams, *BASELINE)]
    as_used = [
        m if m["audio_seconds"] > LONG_SECONDS else b for m, b in zip(mine, base, strict=True)
    ]
    median = statistics.median(r["seconds"] for r in long_runs)
    return {
        "mode": s.mode,
        "beam_size": s.beams,
        "processors": s.processors,
        "threads": s.threads,
        "longform_median_seconds": median,
        "longform_runs_seconds": [r["seconds"] for r in long_runs],
        "longform_x_real_time": long_seconds / median,
        "longform_wer": [r["wer"] for r in long_runs],
        "longform_peak_rss_bytes": max(r["peak_rss_bytes"] or 0 for r in long_runs),
        "longform_split_at": long_runs[0]["split_at"],
        "pooled_wer": pooled_wer([(r["reference"], r["text"]) for r in mine]),
        "pooled_wer_p_over_30s_only": pooled_wer([(r["reference"], r["text"]) for r in as_used]),
        "pooled_seconds": sum(r["seconds"] for r in mine),
        "longform_runs": long_runs,
        "pooled_runs": mine,
    }


def _slim(row: dict) -> None:
    """One argv per row, no references (they are beside the clips), and the long-form text
    once unless a round's differs."""
    row["argv"] = row["longform_runs"][0]["argv"]
    first = row["longform_runs"][0]["text"]
    row["longform_texts_identical"] = all(r["text"] == first for r in row["longform_runs"])
    for run in row["longform_runs"] + row["pooled_runs"] + row["other_long_runs"]:
        del run["reference"], run["argv"]
    for run in row["longform_runs"][1:]:
        if row["longform_texts_identical"]:
            del run["text"]


def _markdown(rows: list[dict], long_clip, clips, rounds: int) -> str:
    lines = [
        f"long-form: {LONGFORM}, {long_clip[2]:.1f} s of audio; median of {rounds} interleaved "
        "runs after an untimed warm-up; whisper-cli's argv from the backend plus `-p N`",
        "",
        "| decoding | -p | -t | median s | runs s | x real time | vs -p 1 -t 2 | WER "
        "| peak RSS (MB) | split at |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = {r["mode"]: r for r in rows if (r["processors"], r["threads"]) == BASELINE}
    for r in rows:
        ratio = r["longform_median_seconds"] / base[r["mode"]]["longform_median_seconds"]
        runs = ", ".join(f"{x:.1f}" for x in r["longform_runs_seconds"])
        wers = sorted(set(f"{w:.3f}" for w in r["longform_wer"]))
        lines.append(
            f"| {r['mode']} | {r['processors']} | {r['threads']} | "
            f"{r['longform_median_seconds']:.2f} | {runs} | {r['longform_x_real_time']:.1f} | "
            f"{ratio:.2f}x | {' / '.join(wers)} | {r['longform_peak_rss_bytes'] / 1e6:.0f} | "
            f"{', '.join(r['longform_split_at']) or '-'} |"
        )
    total = sum(c[2] for c in clips)
    lines += [
        "",
        f"pooled: {len(clips)} clips, {total:.1f} s of audio, one run per clip per setting, "
        "interleaved clip by clip",
        "",
        "| decoding | -p | -t | pooled WER | pooled WER, -p N on clips > 30 s only "
        "| seconds (sum) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['processors']} | {r['threads']} | {r['pooled_wer']:.3f} | "
            f"{r['pooled_wer_p_over_30s_only']:.3f} | {r['pooled_seconds']:.1f} |"
        )
    lines += [
        "",
        "other long audio, one run each: the eval clips of 30 s or less joined in name order "
        f"({rows[0]['other_long_runs'][0]['audio_seconds']:.1f} s), and samples/jfk.wav 16 "
        f"times ({rows[0]['other_long_runs'][1]['audio_seconds']:.1f} s)",
        "",
        "| decoding | -p | -t | joined: WER | joined: s | jfk x16: WER | jfk x16: s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        joined, jfk = r["other_long_runs"]
        lines.append(
            f"| {r['mode']} | {r['processors']} | {r['threads']} | {joined['wer']:.3f} | "
            f"{joined['seconds']:.1f} | {jfk['wer']:.3f} | {jfk['seconds']:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
