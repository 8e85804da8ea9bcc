"""The settings table's rows are worded once (kvscribe/setting_rows.py): no module writes a
row under a name of its own, and what the backends really report uses only those names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvscribe import setting_rows
from kvscribe.audio import load_audio
from tests import loaded
from tests.conftest import SAMPLE

ROOT = Path(__file__).resolve().parents[1]
# Functions whose returned dict literal is a set of rows.
ROW_BUILDERS = {"describe_settings", "decoding_rows", "from_command_line"}


def _written_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every row a module writes with a string literal for its name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if _is_settings_item(target):
                    found.append((node.lineno, target.slice.value))
        if isinstance(node, ast.Call) and _is_settings_update(node.func):
            found += _literal_keys(node.args[0] if node.args else None)
        if isinstance(node, ast.keyword) and node.arg == "settings":
            found += _literal_keys(node.value)
        if isinstance(node, ast.FunctionDef) and node.name in ROW_BUILDERS:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Dict):
                    found += _literal_keys(inner)
    return found


def _is_settings_item(target: ast.AST) -> bool:
    if not isinstance(target, ast.Subscript) or not isinstance(target.slice, ast.Constant):
        return False
    base = target.value
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return name == "settings" and isinstance(target.slice.value, str)


def _is_settings_update(func: ast.AST) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "update"
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "settings"
    )


def _literal_keys(node: ast.AST | None) -> list[tuple[int, str]]:
    if not isinstance(node, ast.Dict):
        return []
    return [
        (key.lineno, key.value)
        for key in node.keys
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    ]


def test_no_module_writes_a_row_under_a_name_of_its_own():
    sources = [*(ROOT / "kvscribe").rglob("*.py"), *(ROOT / "backends").rglob("*.py")]
    written = [
        f"{path.relative_to(ROOT)}:{line}: {name!r}"
        for path in sources
        if "bench" not in path.parts
        for line, name in _written_names(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert written == [], "use kvscribe.setting_rows' names:\n" + "\n".join(written)


def test_the_check_finds_a_row_written_with_a_literal():
    code = (
        "def describe_settings(self):\n    return {'beam size': '5'}\n"
        "report.settings['vad filter'] = 'x'\n"
        "report.settings.update({'batch size': '8'})\n"
        "DecoderReport(settings={'threads': '2'})\n"
    )
    names = sorted(name for _, name in _written_names(ast.parse(code)))
    assert names == ["batch size", "beam size", "threads", "vad filter"]


@pytest.mark.model
@pytest.mark.parametrize("backend", ["ctranslate2", "transformers"])
@pytest.mark.parametrize("batch", [1, 8])
def test_what_a_backend_reports_is_worded_by_the_rows(backend, batch, long_form_head):
    if backend == "transformers":
        pytest.importorskip("torch")
    from kvscribe.contract import DecodeRequest

    engine = loaded.backend(backend)
    audio = load_audio(long_form_head if batch > 1 else SAMPLE)
    # The batched long file greedy: its rows are the beam search's (compared on both
    # engines); the sequential run keeps the beam search's own.
    beam = {"beam_size": 1} if batch > 1 else {}
    run = engine.transcribe(audio, DecodeRequest(batch_size=batch, word_timestamps=True, **beam))
    list(run.segments)
    reported = {*engine.describe_settings(), *run.report.settings}
    assert reported <= setting_rows.ALL, sorted(reported - setting_rows.ALL)
    assert setting_rows.BEAM_SIZE in reported
