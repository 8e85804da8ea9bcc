"""How much of a French or Spanish WER gap is the way numbers are written.

    .venv/bin/python benchmarks/wer_numerals.py --results NAME [--results NAME ...]
        [--made DIR ...] [--out wer_numerals]

The telephone recordings' references spell a key both ways ("presione 4" in one prompt,
"presione cuatro" in another), and Whisper writes it either way depending on context.
Whisper's English normaliser standardises numbers; its basic one, which French and Spanish
are scored with, does not, so "4" against "cuatro" counts as an error though the word
was heard. This script scores again the texts a benchmarks/longform_wer_paths.py run committed
(benchmarks/results/NAME.json: faster-whisper sequential's and kvscribe's per recording and
CTranslate2 path), with the numbers 0-10 written as words on both sides, beside the plain
WER. Nothing is decoded again. --made DIR finds the references of recordings made outside
the repository (eval/realform/make_asterisk.py, make_reordered.py).

Writes benchmarks/results/OUT.json and OUT.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import results_file  # noqa: E402
from longform_peers import CLIPS, _basic_normalizer, made_clips, reference  # noqa: E402

from kvscribe.bench.wer import edit_distance  # noqa: E402

NUMBER_WORDS = {  # 0-10, the keys and counts the telephone prompts say
    "fr": [
        "zero",
        "un",
        "deux",
        "trois",
        "quatre",
        "cinq",
        "six",
        "sept",
        "huit",
        "neuf",
        "dix",
    ],
    "es": [
        "cero",
        "uno",
        "dos",
        "tres",
        "cuatro",
        "cinco",
        "seis",
        "siete",
        "ocho",
        "nueve",
        "diez",
    ],
}
ENGINES = ("fw-sequential", "kvscribe-default")


def spelled_words(text: str, language: str) -> list[str]:
    """The basic normaliser's words (diacritics removed), 0-10 written as words."""
    spelled = NUMBER_WORDS[language]
    found = _basic_normalizer()(text).split()
    return [spelled[int(w)] if w.isdigit() and int(w) < len(spelled) else w for w in found]


def spelled_wer(reference_text: str, hypothesis: str, language: str) -> float:
    ref = spelled_words(reference_text, language)
    return edit_distance(ref, spelled_words(hypothesis, language)) / max(1, len(ref))


def rescored(results: list[dict], clips: dict) -> list[dict]:
    """Each French or Spanish row of `results`: both engines' WER as committed (plain) and
    with numbers spelled."""
    rows = []
    for row in results:
        clip = clips.get(row["clip"])
        if clip is None or clip.language not in NUMBER_WORDS:
            continue
        ref = reference(clip)
        out = {"clip": row["clip"], "path": row["path"]}
        for engine in ENGINES:
            run = row[engine]
            out[engine] = {
                "plain": run["wer"],
                "spelled": spelled_wer(ref, run["text"], clip.language),
            }
        rows.append(out)
    return rows


def markdown(rows: list[dict], sources: list[str]) -> str:
    lines = [
        f"Texts from {', '.join(f'`{s}.json`' for s in sources)}. WER per recording and "
        "CTranslate2 path, faster-whisper sequential / kvscribe's default (difference): "
        "plain (Whisper's basic normaliser, diacritics removed), then with 0-10 written as "
        "words on both sides.",
        "",
        "| recording | path | plain | numbers as words |",
        "|---|---|---|---|",
    ]
    for row in rows:
        cells = []
        for kind in ("plain", "spelled"):
            fw, kv = row["fw-sequential"][kind], row["kvscribe-default"][kind]
            cells.append(f"{fw:.3f} / {kv:.3f} ({kv - fw:+.3f})")
        lines.append(f"| {row['clip']} | {row['path']} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> None:
    parser = results_file.arguments(__doc__)
    parser.add_argument(
        "--results",
        action="append",
        required=True,
        metavar="NAME",
        help="a longform_wer_paths.py result in benchmarks/results (repeatable)",
    )
    parser.add_argument(
        "--made",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="where recordings made outside the repository lie (repeatable)",
    )
    parser.add_argument("--out", default="wer_numerals")
    args = parser.parse_args()
    clips = {c.name: c for c in CLIPS}
    for folder in args.made:
        clips.update({c.name: c for c in made_clips(folder)})
    rows = []
    for name in args.results:
        source = results_file.RESULTS / f"{name}.json"
        if not source.exists():
            sys.exit(f"{source}: no such result (run benchmarks/longform_wer_paths.py first)")
        rows += rescored(json.loads(source.read_text())["rows"], clips)
    meta = {
        "sources": args.results,
        "units": "WER per recording, French and Spanish after Whisper's basic normaliser "
        "(diacritics removed)",
    }
    results_file.write(args.out, meta, rows, markdown(rows, args.results))
    print(markdown(rows, args.results))


if __name__ == "__main__":
    main()
