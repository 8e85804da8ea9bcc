"""An option is declared once (kvscribe/controls.py, kvscribe/cli/shared_options.py) and reaches
every place it must from there; a profile's decoding defaults reach a request once
(Backend.completed), and no engine reads one from its settings."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from kvscribe import profile
from kvscribe.audio import load_audio
from kvscribe.cli import live_parameters, shared_options, transcribe_parameters
from kvscribe.contract import OPTIONAL_FIELDS, PROFILE_DEFAULTS, DecodeRequest, completed
from kvscribe.controls import CONTROLS
from kvscribe.errors import UsageError
from kvscribe.options import LiveOptions, TranscribeOptions, output_shaping_values
from tests.conftest import EVAL_DIR, LONG_FORM, ROOT, SAMPLE, run_cli

ENGINE_SOURCES = [*(ROOT / "backends").rglob("*.py"), *(ROOT / "kvscribe").rglob("*.py")]
# 1.1 s of speech: whether an engine honours a flag shows in the stats of any input.
HELLO_WORLD = EVAL_DIR / "audioeval_kokoro_en_hello_world.wav"


@pytest.mark.parametrize("control", CONTROLS, ids=lambda c: c.name)
def test_a_control_reaches_both_commands_the_request_and_the_resume_key(control):
    for table in (transcribe_parameters.PARAMETERS, live_parameters.PARAMETERS):
        kind, option = table[control.name]
        assert kind is control.kind and control.flag in option.param_decls
    assert OPTIONAL_FIELDS[control.name] == control.flag
    assert control.name in {f.name for f in dataclasses.fields(DecodeRequest)}
    default = TranscribeOptions(inputs=(SAMPLE,))
    assert getattr(default, control.name) == control.default
    assert control.name not in output_shaping_values(default)  # keyed only when set
    request = DecodeRequest(**default.request_fields() | {"vad": None, "clips": ()})
    assert getattr(request, control.name) == getattr(DecodeRequest(), control.name)


def test_a_control_is_checked_where_it_is_declared():
    with pytest.raises(UsageError) as low:
        TranscribeOptions(inputs=(SAMPLE,), repetition_penalty=0.5)
    assert low.value.subject == "--repetition-penalty"
    with pytest.raises(UsageError) as none:
        LiveOptions(max_new_tokens=0)
    assert none.value.subject == "--max-new-tokens"
    options = TranscribeOptions(inputs=(SAMPLE,), repetition_penalty=1.2)
    assert options.request_fields()["repetition_penalty"] == 1.2
    assert output_shaping_values(options)["repetition_penalty"] == 1.2


def test_every_shared_flag_is_in_both_commands_tables():
    for option in shared_options.SHARED:
        assert option.name in transcribe_parameters.PARAMETERS
        assert option.name in live_parameters.PARAMETERS


def _reads_a_profile_default(tree: ast.AST) -> list[int]:
    """Lines that read a PROFILE_DEFAULTS key from a mapping: `x.get("beam_size", ...)` or
    `x["beam_size"]`."""
    lines = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args:
            key = node.args[0]
        elif isinstance(node, ast.Subscript):
            key = node.slice
        if isinstance(key, ast.Constant) and key.value in PROFILE_DEFAULTS:
            lines.append(node.lineno)
    return lines


def test_mics_streaming_defaults_are_the_sessions_own():
    """`kvscribe mic`'s flags, LiveOptions and the session share one default each."""
    from kvscribe.live.streaming import StreamSettings
    from kvscribe.voice.silero import VadSettings

    session = StreamSettings()
    shared = {"step": session.step, "commit_silence": session.commit_silence}
    shared |= {"context": session.context, "vad_threshold": VadSettings().threshold}
    live = LiveOptions()
    for name, default in shared.items():
        assert getattr(live, name) == default, name
    for name in (*shared, "min_silence"):
        _, option = live_parameters.PARAMETERS[name]
        assert option.default == getattr(live, name), name


def test_no_engine_reads_a_decoding_default_from_its_settings():
    found = {
        str(path.relative_to(ROOT)): lines
        for path in ENGINE_SOURCES
        if path.name != "base.py"
        and (lines := _reads_a_profile_default(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}, f"a profile default read outside kvscribe.contract.completed: {found}"
    planted = ast.parse('beams = request.beam_size or int(self.settings.get("beam_size", 5))')
    assert _reads_a_profile_default(planted) == [1]


def test_the_profile_completes_what_a_request_leaves_open():
    section = profile.load("tiny-vram").settings_for("ctranslate2")
    filled = completed(DecodeRequest(), section)
    assert filled.beam_size == section["beam_size"]
    assert filled.batch_size == section["batch_size"]
    assert filled.condition_on_previous_text == section.get("condition_on_previous_text", True)
    given = DecodeRequest(beam_size=3, batch_size=2, condition_on_previous_text=False)
    assert completed(given, section) == given  # what the request says wins
    assert completed(DecodeRequest(), {}) == DecodeRequest(**PROFILE_DEFAULTS)


def _text(run) -> str:
    return " ".join(segment.text.strip() for segment in run.segments)


@pytest.mark.model
def test_the_repetition_penalty_reaches_both_ctranslate2_paths(ct2_backend):
    """Sequential (one window) and batched (speech chunks of a long file): a strong penalty
    changes the words, so the engine was given it on each path. Greedy: the penalty acts on
    each step's scores whatever the search."""
    short = load_audio(SAMPLE)
    long = load_audio(LONG_FORM)[: 40 * 16000]  # over one window: two speech chunks
    for audio, batch in ((short, 1), (long, 4)):
        plain = _text(ct2_backend.transcribe(audio, DecodeRequest(batch_size=batch, beam_size=1)))
        penalised = DecodeRequest(batch_size=batch, beam_size=1, repetition_penalty=2.5)
        assert _text(ct2_backend.transcribe(audio, penalised)) != plain, f"batch {batch}"


@pytest.mark.transformers
def test_an_engine_without_the_control_says_so_and_one_with_it_does_not(tmp_path: Path):
    for backend, honours in (("transformers", False), ("ctranslate2", True)):
        stats = tmp_path / f"{backend}.json"
        result = run_cli(
            HELLO_WORLD, "--backend", backend, "--repetition-penalty", "1.5", "--stats-json", stats
        )
        assert result.code == 0, result.stderr
        rows = stats.read_text(encoding="utf-8")
        said = f"--repetition-penalty: the {backend} backend cannot honour it" in rows
        assert said != honours, rows
