"""Transcribe eval clips with the CTranslate2 backend in this process; print one JSON object.

    python -m tests.eval_worker CLIP.wav ...

Run as a child process so that CT2_FORCE_CPU_ISA (read when CTranslate2 loads) can
differ between runs: tests/test_eval_clips.py runs it once per instruction set.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kvscribe.backends.base import DecodeRequest

from kvscribe import models, profile, registry
from kvscribe.audio import load_audio


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
