"""What decoding a batched chunk's skipped stretches again gives back, by the stretch's length:
each stretch kvscribe's default reads again on each recording, its decoded seconds, the text
read and what was kept, and each recording's WER under each shortest stretch read again.

    .venv/bin/python benchmarks/reread_stretches.py [--clips A,B] [--made DIR ...]
        [--threshold S ...] [--threads 2] [--out reread_stretches]

kvscribe/rereads.py decodes again every stretch of a chunk's decoded audio its words leave
uncovered for at least MIN_UNFINISHED seconds. Each run here is the default as a user runs
it (`kvscribe FILE -f txt`, tiny.en for English, base with --language otherwise) with
MIN_UNFINISHED set to one threshold, in a child process that logs each stretch read again
(`AlignedChunk.without_echoes` then `plausible_part` on it: what the decode said, and what
was kept). The recordings: benchmarks/longform_peers.py's, and with --made DIR the
asterisk_*.wav recordings made there (eval/realform/make_asterisk.py's holdout part,
make_reordered.py's orders). Nothing is timed; CTranslate2 takes the path it chooses.

Writes benchmarks/results/OUT.json and OUT.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import results_file  # noqa: E402
from longform_peers import CLIPS, KVSCRIBE, _names, command, made_clips, text_of, wer  # noqa: E402

from kvscribe.audio import SAMPLE_RATE  # noqa: E402

CHILD = "--child"  # argv[1] of the logging child: LOG THRESHOLD then kvscribe's argv
DEFAULT = "kvscribe-default"  # longform_peers.py's command for it


def child(log: Path, threshold: float, argv: list[str]) -> None:
    """kvscribe's CLI with MIN_UNFINISHED at `threshold`, each stretch read again logged."""
    from kvscribe import rereads
    from kvscribe.aligned_chunks import AlignedChunk
    from kvscribe.cli import main

    rereads.MIN_UNFINISHED = threshold
    echoes, plausible = AlignedChunk.without_echoes, AlignedChunk.plausible_part
    reading: dict = {}
    out = log.open("a", encoding="utf-8")

    def without_echoes(self, part, around):
        reading.update(part=part, said="".join(w.word for w in self.words))
        return echoes(self, part, around)

    def plausible_part(self):
        kept = plausible(self)
        part = reading.pop("part", None)
        if part is not None:  # only _with_tails calls it on a stretch
            row = {
                "start": round(part.start / SAMPLE_RATE, 2),
                "end": round(part.end / SAMPLE_RATE, 2),
                "seconds": round(part.seconds, 2),
                "said": reading["said"],
                "kept": "".join(w.word for w in kept.words) if kept else None,
            }
            out.write(json.dumps(row) + "\n")
            out.flush()
        return kept

    AlignedChunk.without_echoes, AlignedChunk.plausible_part = without_echoes, plausible_part
    sys.argv = [KVSCRIBE, *argv]
    main()


def run(clip, threshold: float, threads: int) -> dict:
    argv = command(DEFAULT, clip, threads)[1:]  # the user's command, less the executable
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "stretches.jsonl"
        log.touch()
        logging = [sys.executable, __file__, CHILD, str(log), str(threshold), *argv]
        done = subprocess.run(logging, capture_output=True, text=True, env=os.environ)
        if done.returncode:
            sys.exit(f"{clip.name} at {threshold}: exit {done.returncode}\n{done.stderr}")
        stretches = [json.loads(line) for line in log.read_text().splitlines()]
    text = text_of(DEFAULT, done.stdout)
    return {"wer": wer(clip, [text]), "stretches": stretches, "text": text}


def markdown(rows: list[dict], thresholds: list[float]) -> str:
    first = thresholds[0]
    lines = [
        f"Each stretch read again at the lowest threshold ({first:g} s), in decoded seconds, "
        "with what its decode said and what was kept (none: dropped as an echo or as words "
        "not said, `AlignedChunk.plausible_part`):",
        "",
        "| recording | stretch (s into the file) | decoded s | said | kept |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        for s in row["runs"][str(first)]["stretches"]:
            kept = repr(s["kept"]) if s["kept"] is not None else "none"
            lines.append(
                f"| {row['clip']} | {s['start']:.2f}-{s['end']:.2f} | {s['seconds']:.2f} "
                f"| {s['said']!r} | {kept} |"
            )
    header = " | ".join(f"WER, stretches read at >= {t:g} s" for t in thresholds)
    lines += ["", f"| recording | {header} |", "|---" * (len(thresholds) + 1) + "|"]
    for row in rows:
        cells = " | ".join(
            f"{row['runs'][str(t)]['wer']:.3f} ({len(row['runs'][str(t)]['stretches'])} read)"
            for t in thresholds
        )
        lines.append(f"| {row['clip']} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = results_file.arguments(__doc__)
    parser.add_argument("--clips", help="comma-separated clip names (default: all)")
    parser.add_argument("--made", type=Path, action="append", default=[], metavar="DIR")
    parser.add_argument("--threshold", type=float, action="append", metavar="S")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="reread_stretches")
    args = parser.parse_args()
    thresholds = sorted(args.threshold or [1.0, 1.5])
    known = CLIPS + [clip for folder in args.made for clip in made_clips(folder)]
    names = _names(args.clips, [c.name for c in known], "clips")
    clips = [clip for clip in known if clip.name in names]
    rows = []
    for clip in clips:
        runs = {str(t): run(clip, t, args.threads) for t in thresholds}
        print(clip.name, *(f"{t}: {r['wer']:.3f}" for t, r in runs.items()))
        rows.append({"clip": clip.name, "language": clip.language, "runs": runs})
    meta = {
        "thresholds": thresholds,
        "threads": args.threads,
        "units": "WER per recording "
        "(English after Whisper's English normaliser, others its basic one); seconds: "
        "decoded audio of a stretch",
    }
    results_file.write(args.out, meta, rows, markdown(rows, thresholds))


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == CHILD:
        child(Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
    else:
        main()
