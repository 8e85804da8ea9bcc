"""Pooled WER of the eval clips per x86 instruction set CTranslate2 can dispatch here.

    .venv/bin/python benchmarks/eval_isa.py

The bounds in tests/test_eval_clips.py come from this spread: CTranslate2's int8
kernels round differently per instruction set. Each set runs in its own process
(tests/eval_worker.py, CT2_FORCE_CPU_ISA) with the ctranslate2 backend, `cpu-laptop`
(int8, beam 5). Writes benchmarks/results/eval_isa.json and eval_isa.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results_file  # noqa: E402

from tests.conftest import EVAL_DIR, pooled_wer, wer  # noqa: E402
from tests.eval_worker import transcribe_in_child  # noqa: E402
from tests.test_eval_clips import cpu_flags, instruction_sets  # noqa: E402

LONG_FORM = "espeak_longform_en.wav"


def run(isa: str, clips: list[Path]) -> dict:
    pairs = {
        name: (ref, result["text"])
        for name, (ref, result) in transcribe_in_child(clips, isa).items()
    }
    return {
        "isa": isa,
        "pooled_wer": round(pooled_wer(pairs.values()), 4),
        "long_form_wer": round(wer(*pairs[LONG_FORM]), 4),
        "per_clip_wer": {name: round(wer(*pair), 4) for name, pair in sorted(pairs.items())},
    }


def main() -> None:
    clips = sorted(EVAL_DIR.glob("*.wav"))
    rows = [run(isa, clips) for isa in instruction_sets() if isa != "default"]
    meta = {
        "device": "cpu",
        "clips": len(clips),
        "backend": "ctranslate2",
        "profile": "cpu-laptop (int8, beam 5)",
        "model": "tiny.en",
        "avx512f": "avx512f" in cpu_flags(),
    }
    table = [
        "# Eval-clip WER per CTranslate2 instruction set",
        "",
        f"tiny.en, ctranslate2 `cpu-laptop` (int8, beam 5), {len(clips)} clips of eval/.",
        "",
        "| CT2_FORCE_CPU_ISA | pooled WER | long-form WER |",
        "|---|---|---|",
        *(f"| {r['isa']} | {r['pooled_wer']:.3f} | {r['long_form_wer']:.3f} |" for r in rows),
    ]
    results_file.write("eval_isa", meta, rows, "\n".join(table))
    print("\n".join(table))


if __name__ == "__main__":
    main()
