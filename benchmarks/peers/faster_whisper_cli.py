"""faster-whisper as a user would call it from a few lines of Python: the peer that
benchmarks/longform_peers.py times as a whole process next to kvscribe's CLI.

    python faster_whisper_cli.py AUDIO --model-dir DIR [--mode sequential|batched]
        [--beam-size 5] [--batch-size 8] [--threads 2] [--language xx] [--word-timestamps]

Prints one "start<TAB>end<TAB>text" line per segment on stdout. It imports nothing from
kvscribe on purpose, so the process pays only faster-whisper's own start-up and loading.
"""

from __future__ import annotations

import argparse

from faster_whisper import BatchedInferencePipeline, WhisperModel


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("audio")
    parser.add_argument("--model-dir", required=True, help="a CTranslate2 Whisper model folder")
    parser.add_argument("--mode", choices=("sequential", "batched"), default="sequential")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8, help="batched mode only")
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2 cpu_threads")
    parser.add_argument("--language", default=None, help="detected when omitted")
    parser.add_argument("--word-timestamps", action="store_true")
    return parser.parse_args()


def transcribe(args: argparse.Namespace):
    """The library's two documented entry points, each with its own defaults otherwise:
    sequential = WhisperModel.transcribe (30 s windows, previous-text prompts), batched =
    BatchedInferencePipeline.transcribe (VAD-cut chunks decoded side by side)."""
    model = WhisperModel(
        args.model_dir, device="cpu", compute_type="int8", cpu_threads=args.threads
    )
    options = {
        "beam_size": args.beam_size,
        "language": args.language,
        "word_timestamps": args.word_timestamps,
    }
    if args.mode == "batched":
        pipeline = BatchedInferencePipeline(model)
        segments, _ = pipeline.transcribe(args.audio, batch_size=args.batch_size, **options)
    else:
        segments, _ = model.transcribe(args.audio, **options)
    return segments


def main() -> None:
    # Segments are a generator: decoding happens while they are printed, as in a user's loop.
    for segment in transcribe(parse()):
        print(f"{segment.start:.2f}\t{segment.end:.2f}\t{segment.text.strip()}", flush=True)


if __name__ == "__main__":
    main()
