"""Where the benchmarks find the project's eval clips (eval/, sources in eval/MANIFEST.tsv)."""

from __future__ import annotations

from pathlib import Path

CLIPS = Path(__file__).resolve().parent.parent / "eval" / "clips"
