"""Transcribe eval clips with the CTranslate2 backend in this process; print one JSON object.

    python -m tests.eval_worker CLIP.wav ...

Run as a child process so that CT2_USE_MKL and CT2_FORCE_CPU_ISA (read when CTranslate2
loads) can differ between runs: tests/test_eval_clips.py runs it once per compute path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest
from tests.ct2_paths import Ct2Path

ROOT = Path(__file__).resolve().parent.parent


def transcribe_in_child(clips: list[Path], path: Ct2Path) -> dict[str, tuple[str, dict]]:
    """clip name -> (reference text, result) from a child process with CTranslate2 forced to
    compute path `path` (tests/ct2_paths.py)."""
    env = path.environment()
    env["HF_HUB_OFFLINE"] = "1"  # the embedded model only: nothing reaches the network
    isa = path.name
    proc = subprocess.run(
        [sys.executable, "-m", "tests.eval_worker", *map(str, clips)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"eval worker ({isa}) failed: {proc.stderr[-2000:]}")
    return {
        Path(path).name: (Path(path).with_suffix(".txt").read_text(encoding="utf-8"), result)
        for path, result in json.loads(proc.stdout).items()
    }


def main(paths: list[str]) -> None:
    backend_cls = registry.get("ctranslate2")
    model = models.resolve(None, backend_cls.capabilities.model_formats)
    backend = backend_cls(model, profile.load("cpu-laptop"), "cpu")
    backend.load()
    results = {}
    for path in paths:
        run = backend.transcribe(load_audio(Path(path)), DecodeRequest())
        segments = list(run.segments)
        results[path] = {
            "text": "".join(s.text for s in segments),
            "starts": [s.start for s in segments],
            "end": segments[-1].end if segments else 0.0,
            "windows": run.report.windows,
            "tokens": run.report.tokens,
            "kv_self_peak_bytes": run.report.kv_self_peak_bytes,
        }
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
