"""Shared fixtures: the shipped sample, files derived from it, the real CLI, WER."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "jfk.wav"
SAMPLE_TEXT = (ROOT / "samples" / "jfk.txt").read_text(encoding="utf-8")
EVAL_DIR = ROOT.parent / "shared" / "eval" / "clips"
KVSCRIBE = Path(sys.executable).parent / "kvscribe"


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory, monkeypatch):
    """No test touches the user's cache/config or the network."""
    base = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(base / "cache"))
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after Whisper's English normalisation."""
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    normalize = EnglishTextNormalizer()
    return jiwer.wer(normalize(reference), normalize(hypothesis))


def pooled_wer(pairs) -> float:
    """Corpus WER over (reference, hypothesis) pairs: errors over normalised reference words.

    Pooling must count normalised words: the normaliser turns "one two ... ten" into one
    token, and weighting by raw words would let one such clip dominate.
    """
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    normalize = EnglishTextNormalizer()
    references, hypotheses = zip(*((normalize(r), normalize(h)) for r, h in pairs), strict=True)
    return jiwer.wer(list(references), list(hypotheses))


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str | Path, cwd: Path | None = None, timeout: float = 300) -> Result:
    """Run the installed `kvscribe` executable for real."""
    proc = subprocess.run(
        [str(KVSCRIBE), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=os.environ.copy(),
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="session")
def derived(tmp_path_factory) -> dict[str, Path]:
    """The sample re-encoded and damaged in every way the tests need (made once)."""
    from tests import media

    return media.make_all(SAMPLE, tmp_path_factory.mktemp("derived"))


@pytest.fixture(scope="session")
def ct2_backend():
    """The real CTranslate2 backend with the embedded tiny.en, loaded once."""
    from kvscribe import models, profile, registry

    backend_cls = registry.get("ctranslate2")
    model = models.resolve(None, backend_cls.capabilities.model_formats)
    backend = backend_cls(model, profile.load("cpu-laptop"), "cpu")
    backend.load()
    return backend
