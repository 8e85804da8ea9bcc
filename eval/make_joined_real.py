"""Joins the eval's real short clips into one 50 s recording, so the long-form path (over 30 s:
VAD chunking, batching, previous-text prompts) is also measured on real voices, not only on
espeak-ng's or on 8 kHz telephone prompts.

usage: python eval/make_joined_real.py   (writes eval/clips_joined/joined_real.wav and .txt; prints
the file, seconds, parts and sha256 for its MANIFEST.tsv row)

Parts: every MANIFEST.tsv row of kind `real` under clips/, sorted by file name, 0.5 s of digital
silence between two parts. The reference is the parts' .txt references joined with a space.
Only the standard library, no resampling or dithering: the same inputs give the same bytes.
"""
import csv, hashlib, wave
from pathlib import Path

EVAL = Path(__file__).resolve().parent
OUT = EVAL / "clips_joined" / "joined_real"
RATE, GAP_SECONDS = 16000, 0.5


def real_clips() -> list[Path]:
    """The clips MANIFEST.tsv marks real (not TTS), from clips/ only: realform/ is already long."""
    with open(EVAL / "MANIFEST.tsv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    names = [r["file"] for r in rows if r["kind"] == "real" and r["file"].startswith("clips/")]
    return sorted((EVAL / n for n in names), key=lambda p: p.name)


def pcm(path: Path) -> bytes:
    """A part's samples; refuses anything but 16 kHz mono s16 so nothing is silently converted."""
    with wave.open(str(path)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (RATE, 1, 2), path
        return w.readframes(w.getnframes())


def main() -> None:
    parts = real_clips()
    gap = b"\0\0" * int(RATE * GAP_SECONDS)
    audio = gap.join(pcm(p) for p in parts)
    OUT.parent.mkdir(exist_ok=True)
    with wave.open(str(OUT.with_suffix(".wav")), "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(RATE)
        w.writeframes(audio)
    text = " ".join(p.with_suffix(".txt").read_text(encoding="utf-8").strip() for p in parts)
    OUT.with_suffix(".txt").write_text(text + "\n", encoding="utf-8")
    digest = hashlib.sha256(OUT.with_suffix(".wav").read_bytes()).hexdigest()
    seconds = len(audio) / 2 / RATE
    print(OUT.with_suffix(".wav").relative_to(EVAL), f"{seconds:.3f}", digest, sep="\t")
    print(f"{len(parts)} parts:", ", ".join(p.stem for p in parts))


if __name__ == "__main__":
    main()
