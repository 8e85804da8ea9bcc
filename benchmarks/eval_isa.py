"""Accuracy on every compute path CTranslate2 can take on this CPU (tests/ct2_paths.py: Intel MKL
and oneDNN, each with every x86 instruction set from AVX up).

    .venv/bin/python benchmarks/eval_isa.py [--oldest AVX|AVX2] [--out NAME]

The accuracy bounds of the suite (tests/test_eval_clips.py, tests/test_live_cli.py) sit above
the worst path measured here. Per path, each in processes of its own (CT2_USE_MKL,
CT2_FORCE_CPU_ISA), with the ctranslate2 backend, `cpu-laptop` (int8, beam 5), tiny.en:
- the eval clips (tests/eval_worker.py): pooled WER and the 182 s long-form clip's;
- the realform English telephone recording, `kvscribe FILE -f txt`: long-form WER;
- live mode on the joined real recordings through a pipe, as the suite's test runs it
  (`kvscribe mic --live --input - --step 4`), and the same file offline.
Writes benchmarks/results/NAME.json and .md (eval_ct2_paths unless --out says).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import results_file  # noqa: E402

from kvscribe import audio  # noqa: E402
from tests.conftest import EVAL_DIR, KVSCRIBE, pooled_wer, wer  # noqa: E402
from tests.ct2_paths import (  # noqa: E402
    INSTRUCTION_SETS,
    Ct2Path,
    available,
    cpu_flags,
    cpu_vendor,
)
from tests.eval_worker import transcribe_in_child  # noqa: E402

LONG_FORM = "espeak_longform_en.wav"
REALFORM = EVAL_DIR.parent / "realform" / "asterisk_en_ivr_dev.wav"
JOINED_REAL = EVAL_DIR.parent / "clips_joined" / "joined_real.wav"


def _cli(path: Ct2Path, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        [str(KVSCRIBE), *args],
        input=stdin,
        capture_output=True,
        env=path.environment(),
        check=True,
        timeout=1800,
    )
    return done.stdout.decode()


def _reference(clip: Path) -> str:
    return clip.with_suffix(".txt").read_text(encoding="utf-8")


def run(path: Ct2Path, clips: list[Path]) -> dict:
    pairs = {
        name: (ref, result["text"])
        for name, (ref, result) in transcribe_in_child(clips, path).items()
    }
    samples = audio.load_audio(JOINED_REAL)
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    live = _cli(path, "mic", "--live", "--input", "-", "-q", "--step", "4", stdin=pcm)
    offline = _cli(path, str(JOINED_REAL), "-q", "-f", "txt")
    realform = _cli(path, str(REALFORM), "-q", "-f", "txt")
    row = {
        "path": path.name,
        "pooled_wer": round(pooled_wer(pairs.values()), 4),
        "long_form_wer": round(wer(*pairs[LONG_FORM]), 4),
        "realform_en_wer": round(wer(_reference(REALFORM), realform), 4),
        "joined_offline_wer": round(wer(_reference(JOINED_REAL), offline), 4),
        "joined_live_wer": round(wer(_reference(JOINED_REAL), live), 4),
        "per_clip_wer": {name: round(wer(*pair), 4) for name, pair in sorted(pairs.items())},
        "joined_live_text": live,
    }
    print(row["path"], {k: v for k, v in row.items() if k.endswith("_wer") and k[0] != "p"})
    return row


def _mkl_kernels() -> str:
    if cpu_vendor() == "GenuineIntel":
        return "MKL's own choice (an Intel CPU)"
    return "Intel's kernels for the forced instruction set (tests/mkl_cpu_type.c preloaded)"


def _arguments() -> argparse.Namespace:
    parser = results_file.arguments(__doc__)
    parser.add_argument(
        "--oldest",
        default="AVX",
        choices=[name for name, _ in INSTRUCTION_SETS],
        help="the oldest instruction set measured (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        default="eval_ct2_paths",
        metavar="NAME",
        help="write benchmarks/results/NAME.json and .md (default: %(default)s)",
    )
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    oldest, out = args.oldest, args.out
    clips = sorted(EVAL_DIR.glob("*.wav"))
    rows = [run(path, clips) for path in available(oldest=oldest)]
    meta = {
        "device": "cpu",
        "clips": len(clips),
        "backend": "ctranslate2",
        "profile": "cpu-laptop (int8, beam 5)",
        "model": "tiny.en",
        "avx512f": "avx512f" in cpu_flags(),
        "cpu_vendor": cpu_vendor(),
        "mkl_kernels": _mkl_kernels(),
        "live": "kvscribe mic --live --input - -q --step 4 (16-bit PCM, as fast as it is read)",
    }
    table = [
        "# Accuracy per CTranslate2 compute path",
        "",
        f"tiny.en, ctranslate2 `cpu-laptop` (int8, beam 5); {len(clips)} clips of eval/clips, "
        "the realform English telephone recording (366 s), the joined real recordings (50 s) "
        "offline and live through a pipe (`--step 4`). WER after Whisper's English normaliser. "
        f"MKL lanes: {_mkl_kernels()}.",
        "",
        "| path (library-ISA) | pooled eval WER | long-form (espeak) | realform en | "
        "joined offline | joined live | live - offline |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r['path']} | {r['pooled_wer']:.3f} | {r['long_form_wer']:.3f} | "
            f"{r['realform_en_wer']:.3f} | {r['joined_offline_wer']:.3f} | "
            f"{r['joined_live_wer']:.3f} | {r['joined_live_wer'] - r['joined_offline_wer']:+.3f} |"
            for r in rows
        ),
    ]
    results_file.write(out, meta, rows, "\n".join(table))
    print("\n".join(table))


if __name__ == "__main__":
    main()
