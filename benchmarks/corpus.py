"""Where the benchmarks find the project's eval corpus (eval/, sources in eval/MANIFEST.tsv)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "eval"
CLIPS = EVAL / "clips"
REALFORM = EVAL / "realform"
