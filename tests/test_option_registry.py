"""One place per option: the flags `transcribe` and `mic` share are declared once, and the
batch resume key is derived from the options marked as shaping outputs."""

from __future__ import annotations

import dataclasses
import re

import pytest

from kvscribe.batch import output_settings
from kvscribe.cli.shared_options import SHARED
from kvscribe.manifest import options_key
from kvscribe.options import EngineOptions, TranscribeOptions, output_shaping_fields
from tests.conftest import SAMPLE, run_cli

# cpu-laptop, not auto: the key must not depend on the machine the test runs on.
BASE = TranscribeOptions(inputs=(SAMPLE,), profile="cpu-laptop")

# Per output-shaping option, a value that decodes differently from BASE (after the profile
# fills in what BASE leaves open: cpu-laptop runs on the cpu with kv self=full cross=shared).
DIFFERENT = {
    "backend": "transformers",
    "profile": "gpu",
    "model": "base.en",
    "language": "de",
    "task": "translate",
    "beam_size": 3,
    "device": "cuda",
    "kv_policy": "window=64",
    "kv_cross": "full",
    "batch_size": 2,
    "compute_type": "float32",
    "initial_prompt": "Glossary: kvscribe.",
    "condition_on_previous_text": False,
    "temperature": 0.4,
    "temperature_increment_on_fallback": 0.0,
    "best_of": 2,
    "compression_ratio_threshold": 2.0,
    "logprob_threshold": -0.5,
    "no_speech_threshold": 0.3,
    "word_timestamps": True,
    "vad_filter": True,
    "vad_threshold": 0.7,
    "vad_min_speech": 0.5,
    "vad_min_silence": 1.0,
    "vad_pad": 0.1,
    "highlight_words": True,
    "max_line_width": 42,
    "max_line_count": 2,
    "max_words_per_line": 5,
    "word_level_tsv": True,
    "hotwords": "Kennedy",
    "max_new_tokens": 50,
    "suppress_tokens": "-1,50363",
    "hallucination_silence_threshold": 2.0,
    "repetition_penalty": 1.3,
    "clip_timestamps": "0,5",
}

# Where outputs go, which formats, how fast, how loudly: never what a transcript says.
NOT_SHAPING = {
    "inputs",
    "formats",
    "output_dir",
    "stats_json",
    "quiet",
    "recursive",
    "globs",
    "jobs",
    "force",
    "fail_fast",
    "json_events",
    "threads",
    "output_name",  # the file's name, not its content
    "input_format",  # how stdin is read; the audio decides the content
}


_WORD_LAYOUT = {
    "highlight_words",
    "max_line_width",
    "max_line_count",
    "max_words_per_line",
    "word_level_tsv",
}


def test_options_added_later_leave_earlier_manifests_keys_alone():
    """A manifest written before the decoding flags existed must still resume: at their
    defaults they are not in the key at all."""
    settings = output_settings(BASE)
    assert "word_timestamps" not in settings and "temperature" not in settings
    assert "beam_size" in settings  # an option that was always keyed still is


def _key(options: TranscribeOptions) -> str:
    return options_key(output_settings(options))


def test_every_option_says_whether_it_shapes_outputs():
    names = {f.name for f in dataclasses.fields(TranscribeOptions)}
    undecided = names - set(output_shaping_fields(TranscribeOptions)) - NOT_SHAPING
    assert not undecided, (
        f"{sorted(undecided)}: mark them shapes_output in kvscribe/options.py, "
        "or add them to NOT_SHAPING here if they cannot change an output's content"
    )


@pytest.mark.parametrize("name", output_shaping_fields(TranscribeOptions))
def test_each_output_shaping_option_changes_the_resume_key(name):
    if name not in DIFFERENT:
        pytest.fail(f"add a value of {name} that changes outputs to DIFFERENT")
    needs = {"max_line_count": {"max_line_width": 42}}.get(name, {})  # valid alone otherwise
    if name in _WORD_LAYOUT:  # a format it lays out
        needs |= {"formats": ("tsv",) if name == "word_level_tsv" else ("srt",)}
    needs_words = _WORD_LAYOUT | {"hallucination_silence_threshold"}
    vad_settings = {"vad_threshold", "vad_min_speech", "vad_min_silence", "vad_pad"}
    # what the option tunes, switched on: --word-timestamps, --vad-filter
    on = {"word_timestamps": True} if name in needs_words else {}
    on |= {"vad_filter": True} if name in vad_settings else {}
    changed = dataclasses.replace(BASE, **on, **needs, **{name: DIFFERENT[name]})
    if on:  # the option must change the key beyond what switching on what it tunes does
        base_on = dataclasses.replace(BASE, **on, **needs)
        assert _key(changed) != _key(base_on), f"{name} is missing from the batch resume key"
    assert _key(changed) != _key(BASE), f"{name} is missing from the batch resume key"


def test_options_that_do_not_shape_outputs_keep_the_resume_key(tmp_path):
    in_a_folder = dataclasses.replace(BASE, output_dir=tmp_path)
    louder_faster = dataclasses.replace(
        in_a_folder, formats=("srt",), quiet=True, jobs=3, force=True, recursive=True
    )
    assert _key(louder_faster) == _key(in_a_folder)


def test_every_shared_option_has_one_declared_flag():
    declared = [option.name for option in SHARED]
    assert len(declared) == len(set(declared))
    assert {f.name for f in dataclasses.fields(EngineOptions)} <= set(declared)


def _has_flag(help_text: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text) is not None


def test_every_shared_option_is_in_both_commands_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # no flag column squeezed by a narrow terminal
    helps = {command: run_cli(command, "--help") for command in ("transcribe", "mic")}
    for command, result in helps.items():
        assert result.code == 0, result.stderr
        missing = [f for option in SHARED for f in option.flags if not _has_flag(result.stdout, f)]
        assert not missing, f"`kvscribe {command} --help` lacks {missing}"
