"""Live mode's reading of one clip with the stream's chunks falling elsewhere: the clip replayed
as fast as possible after each of several lengths of silence, and what each run committed.

    .venv/bin/python benchmarks/live_lead_in.py [--clip samples/jfk.wav]
        [--lead-ins 0.30:0.40:0.005,1.0:2.0:0.05] [--word asked] [--offline]
        [--out live_lead_in]

A microphone starts a clip wherever its first audio happens to fall, so the 0.1 s chunks, and
with them the buffer each decode at a pause reads, fall elsewhere on every run. Replaying the
clip (`kvscribe mic --input FILE --as-fast-as-possible`, a whole process each) after N seconds
of digital silence moves them the same way, repeatably. Each run's committed text is scored
against the clip's reference (Whisper's English normaliser); `--word` counts the runs whose
text holds that word (JFK's "ask not" committed at its pause as "asked not"). With
`--offline`, each file is also transcribed as a file (`kvscribe FILE -f txt`, the default
otherwise), which reads the words before a pause with the speech after it.

Writes benchmarks/results/OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results_file  # noqa: E402

from kvscribe.bench.wer import pooled_wer, words  # noqa: E402
from tests.conftest import KVSCRIBE, SAMPLE  # noqa: E402


def lead_ins(spec: str) -> list[float]:
    """ "A:B:STEP,..." as the seconds A, A + STEP, ... below B."""
    seconds = []
    for part in spec.split(","):
        start, stop, step = (float(x) for x in part.split(":"))
        count = round((stop - start) / step)
        seconds += [round(start + i * step, 4) for i in range(count)]
    return seconds


def after_silence(clip: Path, seconds: float, folder: Path) -> Path:
    """`clip` (16-bit WAV) after `seconds` of silence, with 1 s of silence after it."""
    with wave.open(str(clip)) as source:
        rate, params = source.getframerate(), source.getparams()
        samples = np.frombuffer(source.readframes(source.getnframes()), np.int16)
    padded = np.concatenate(
        [np.zeros(round(rate * seconds), np.int16), samples, np.zeros(rate, np.int16)]
    )
    path = folder / f"lead_{seconds:.3f}.wav"
    with wave.open(str(path), "wb") as out:
        out.setparams(params)
        out.writeframes(padded.tobytes())
    return path


def committed(path: Path, folder: Path) -> str:
    out = folder / f"{path.stem}.txt"
    command = [str(KVSCRIBE), "mic", "--input", str(path), "--as-fast-as-possible", "-q"]
    subprocess.run([*command, "-o", str(out)], check=True, capture_output=True, timeout=600)
    return out.read_text(encoding="utf-8")


def offline(path: Path, folder: Path) -> str:
    command = [str(KVSCRIBE), str(path), "-f", "txt", "-q", "-o", str(folder / "offline")]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    return (folder / "offline" / f"{path.stem}.txt").read_text(encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clip", type=Path, default=SAMPLE)
    parser.add_argument("--lead-ins", default="0.30:0.40:0.005,1.0:2.0:0.05")
    parser.add_argument("--word", default="asked")
    parser.add_argument("--offline", action="store_true", help="also transcribe each as a file")
    parser.add_argument("--out", default="live_lead_in")
    args = parser.parse_args()
    reference = args.clip.with_suffix(".txt").read_text(encoding="utf-8")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for seconds in lead_ins(args.lead_ins):
            padded = after_silence(args.clip, seconds, Path(work))
            text = committed(padded, Path(work))
            row = {
                "lead_in_seconds": seconds,
                "text": text,
                "wer": pooled_wer([(reference, text)]),
                "has_word": args.word in words(text),
            }
            if args.offline:
                read = offline(padded, Path(work))
                row |= {"offline_wer": pooled_wer([(reference, read)])}
                row |= {"offline_has_word": args.word in words(read)}
            print(seconds, row["wer"], text.replace("\n", " "), flush=True)
            rows.append(row)
    hits = [r for r in rows if r["has_word"]]
    lines = [
        f"`kvscribe mic --input` of {args.clip.name} after each of {len(rows)} lengths of silence "
        f"({args.lead_ins}, seconds), as fast as possible: runs whose committed text holds "
        f'"{args.word}": {len(hits)} of {len(rows)}.',
    ]
    if args.offline:
        offline_hits = [r for r in rows if r["offline_has_word"]]
        lines += [
            f"The same files transcribed as files (`kvscribe FILE -f txt`): {len(offline_hits)} of "
            f"{len(rows)} hold it; WER {min(r['offline_wer'] for r in rows):.3f}-"
            f"{max(r['offline_wer'] for r in rows):.3f}."
        ]
    lines += [
        "",
        "| silence before (s) | WER | committed |",
        "|---|---|---|",
        *(
            f"| {r['lead_in_seconds']:.3f} | {r['wer']:.3f} | {r['text'].strip()} |".replace(
                "\n", " / "
            )
            for r in rows
        ),
    ]
    meta = {"device": "cpu", "model": "tiny.en", "backend": "ctranslate2", "profile": "auto"}
    results_file.write(args.out, meta, rows, "\n".join(lines))
    print("\n".join(lines[:2]))


if __name__ == "__main__":
    main()
