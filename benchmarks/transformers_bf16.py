"""The transformers backend in float32 against bfloat16 on this CPU: the 15 eval clips and
the realform English recordings (clean and noisy), default profile, one process per
compute type, the clips decoded in turn after a warm-up.

    .venv/bin/python benchmarks/transformers_bf16.py

Says whether this CPU multiplies bfloat16 matrices in hardware (Intel AMX), which is what
makes bfloat16 the transformers backend's default on a CPU. Writes
benchmarks/results/transformers_bf16.{json,md}.
"""

from __future__ import annotations

import json
import subprocess
import sys

import corpus
import results_file

from kvscribe.machine import hardware

REALFORM = corpus.CLIPS.parent / "realform"
SETS = {
    "eval clips (15)": sorted(corpus.CLIPS.glob("*.wav")),
    "realform English": [REALFORM / "asterisk_en_ivr_dev.wav"],
    "realform English, noisy": [REALFORM / "asterisk_en_ivr_dev_noisy.wav"],
}
TYPES = ("float32", "bfloat16")

# One compute type's run, in a process of its own: {set: {"seconds": s, "pairs": [...]}}.
_RUN = """
import json, sys, time
from pathlib import Path
from kvscribe.options import TranscribeOptions
from kvscribe.runner import Runner

class Quiet:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None

compute_type, sets = sys.argv[1], json.loads(sys.argv[2])
first = Path(next(iter(sets.values()))[0])
runner = Runner(TranscribeOptions(inputs=(first,), backend="transformers",
                                  compute_type=compute_type))
runner.prepare()
runner.transcribe_file(first, Quiet(), None)  # warm-up
out = {}
for name, paths in sets.items():
    started, texts = time.perf_counter(), []
    for path in paths:
        _, transcript, _ = runner.transcribe_file(Path(path), Quiet(), None)
        texts.append("".join(segment.text for segment in transcript.segments))
    out[name] = {"seconds": time.perf_counter() - started, "texts": texts}
print(json.dumps(out))
"""


def main() -> None:
    results_file.arguments(__doc__).parse_args()
    from kvscribe.bench.wer import pooled_wer

    sets = {name: [str(path) for path in paths] for name, paths in SETS.items()}
    rows = []
    for compute_type in TYPES:
        done = subprocess.run(
            [sys.executable, "-c", _RUN, compute_type, json.dumps(sets)],
            capture_output=True,
            text=True,
            check=True,
        )
        measured = json.loads(done.stdout.splitlines()[-1])
        for name, paths in SETS.items():
            references = [path.with_suffix(".txt").read_text(encoding="utf-8") for path in paths]
            pairs = list(zip(references, measured[name]["texts"], strict=True))
            rows.append(
                {
                    "compute_type": compute_type,
                    "set": name,
                    "seconds": measured[name]["seconds"],
                    "wer": pooled_wer(pairs),
                }
            )
            print(
                f"{compute_type} | {name}: {rows[-1]['seconds']:.2f} s, WER {rows[-1]['wer']:.4f}"
            )
    amx = hardware.cpu_multiplies_bfloat16()
    table = _table(rows, amx)
    print("\n" + table)
    meta = {
        "device": "cpu",
        "backend": "transformers",
        "profile": "auto",
        "model": "tiny.en (kvscribe's default)",
        "amx_bf16": amx,
        "timing": "time.perf_counter() around each set's transcribe_file calls, in one process "
        "per compute type, after a warm-up decode",
    }
    results_file.write("transformers_bf16", meta, rows, table)


def _table(rows: list[dict], amx: bool) -> str:
    lines = [
        f"This CPU multiplies bfloat16 matrices in hardware (AMX): {'yes' if amx else 'no'}. "
        "transformers backend, default profile, tiny.en; seconds of decoding, one process "
        "per compute type after a warm-up; WER pooled per set.",
        "",
        "| set | float32 (s) | bfloat16 (s) | bfloat16 / float32 | WER float32 | WER bfloat16 |",
        "|---|---|---|---|---|---|",
    ]
    for name in SETS:
        f32, bf16 = (
            next(r for r in rows if r["set"] == name and r["compute_type"] == t) for t in TYPES
        )
        lines.append(
            f"| {name} | {f32['seconds']:.2f} | {bf16['seconds']:.2f} | "
            f"{bf16['seconds'] / f32['seconds']:.2f} | {f32['wer']:.4f} | {bf16['wer']:.4f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
