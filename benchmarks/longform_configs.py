"""The configurations benchmarks/longform_peers.py runs: each name's engine and extra flags
(CONFIGS, described in that script's docstring), and the environment a configuration's
process gets (environment_of)."""

from __future__ import annotations

import os
import sys
import tempfile
from functools import cache
from pathlib import Path

CONFIGS = {  # name -> (engine, extra flags)
    "fw-sequential": ("fw", ["--mode", "sequential"]),
    "fw-batched": ("fw", ["--mode", "batched", "--batch-size", "8"]),
    # the pipeline with every word timed, as kvscribe's default times every word
    "fw-batched-words": ("fw", ["--mode", "batched", "--batch-size", "8", "--word-timestamps"]),
    "kvscribe-default": ("kvscribe", []),
    "kvscribe-batch1": ("kvscribe", ["--batch-size", "1"]),
    # every window's words aligned, so each next window is sought from its last word's end
    "kvscribe-batch1-words": ("kvscribe", ["--batch-size", "1", "--word-timestamps"]),
    "kvscribe-batch4": ("kvscribe", ["--batch-size", "4"]),
    "kvscribe-batch2": ("kvscribe", ["--batch-size", "2"]),
    "kvscribe-transformers": ("kvscribe", ["--backend", "transformers"]),
    "kvscribe-transformers-float32": (
        "kvscribe",
        ["--backend", "transformers", "--compute-type", "float32"],
    ),
    # its int8 linear layers (torch's dynamic quantisation), as ctranslate2 runs int8
    "kvscribe-transformers-int8": (
        "kvscribe",
        ["--backend", "transformers", "--compute-type", "int8"],
    ),
    # ONNX Runtime on `kvscribe setup onnx --compute-type int8`'s graphs, the profile's
    # batching ([onnx] batch_size), and in sequence (batch 1)
    "kvscribe-onnx": ("kvscribe", ["--backend", "onnx", "--compute-type", "float32"]),
    "kvscribe-onnx-int8": ("kvscribe", ["--backend", "onnx", "--compute-type", "int8"]),
    "kvscribe-onnx-int8-batch1": (
        "kvscribe",
        ["--backend", "onnx", "--compute-type", "int8", "--batch-size", "1"],
    ),
    # kvscribe with glibc's own arena limit (8 per core) instead of the command's 2
    # (kvscribe/machine/malloc_arenas.py)
    "kvscribe-default-glibc-arenas": ("kvscribe", []),
    "kvscribe-batch1-glibc-arenas": ("kvscribe", ["--batch-size", "1"]),
    # the same command ending with Python's full teardown (kvscribe/cli/quick_exit.py)
    "kvscribe-default-full-exit": ("kvscribe-full-exit", []),
    "kvscribe-transformers-full-exit": ("kvscribe-full-exit", ["--backend", "transformers"]),
    # both engines in float32 on the same float16 weights, at beam 5 and either side of it:
    # what the engines compute alike, and what hangs on the beam search's width
    "kvscribe-float32": ("kvscribe", ["--compute-type", "float32"]),
}
CONFIGS |= {
    f"{name}-beam{beams}": ("kvscribe", [*CONFIGS[name][1], "--beam-size", str(beams)])
    for beams in (4, 6)
    for name in ("kvscribe-float32", "kvscribe-transformers-float32")
}
# the default at a narrower beam: what the time and the WER hang on beside beam 5
CONFIGS |= {
    f"kvscribe-default-beam{beams}": ("kvscribe", ["--beam-size", str(beams)]) for beams in (3, 4)
}
# kvscribe's default with CTranslate2's own encoder instead of the one `encoder = "auto"`
# measured faster (backends/ctranslate2/encoder.py), through a profile of that name
# (made in a temporary config folder: encoder_profile_folder)
CONFIGS["kvscribe-default-ct2-encoder"] = ("kvscribe", ["--profile", "ct2-encoder"])
# the default writing SRT (segment times) instead of plain text
CONFIGS["kvscribe-default-srt"] = ("kvscribe", ["-f", "srt"])
CONFIGS["kvscribe-batch1-ct2-encoder"] = (
    "kvscribe",
    ["--profile", "ct2-encoder", "--batch-size", "1"],
)
GLIBC_ARENAS = {"MALLOC_ARENA_MAX": str(8 * (os.cpu_count() or 1))}
ENVIRONMENTS = {name: GLIBC_ARENAS for name in CONFIGS if name.endswith("-glibc-arenas")}
# the pipeline and the default with CTranslate2 on AVX-512 where it takes AVX2 by itself
# (an Intel Xeon with AVX-512 and AMX: benchmarks/results/longform_peers_isa_intel_s21.md)
for name in ("fw-batched", "kvscribe-default"):
    CONFIGS[f"{name}-avx512"] = CONFIGS[name]
    ENVIRONMENTS[f"{name}-avx512"] = {"CT2_FORCE_CPU_ISA": "AVX512"}
# `kvscribe` without its quick exit: the entry point's `run()`, then Python's own exit.
FULL_EXIT = "import sys; from kvscribe.cli import run; sys.argv[0] = 'kvscribe'; run()"


@cache
def encoder_profile_folder() -> str:
    """A config folder holding profile `ct2-encoder`: the CPU profile with CTranslate2's
    own encoder."""
    from kvscribe import profile

    folder = Path(tempfile.mkdtemp(prefix="kvscribe-bench-profiles-"))
    (folder / "profiles").mkdir()
    text = profile.available()["cpu-laptop"].read_text(encoding="utf-8")
    text = text.replace('name = "cpu-laptop"', 'name = "ct2-encoder"')
    text = text.replace('encoder = "auto"', 'encoder = "ctranslate2"')
    if 'encoder = "ctranslate2"' not in text:
        sys.exit("the cpu-laptop profile no longer sets `encoder`: update encoder_profile_folder")
    (folder / "profiles" / "ct2-encoder.toml").write_text(text, encoding="utf-8")
    return str(folder)


def environment_of(config: str) -> dict:
    if config.endswith("-ct2-encoder"):
        return {"KVSCRIBE_CONFIG_DIR": encoder_profile_folder()}
    return ENVIRONMENTS.get(config, {})
