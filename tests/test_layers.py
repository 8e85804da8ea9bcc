"""docs/architecture.md's layer table is the law of the imports: every module sits in one
row, and no import (at the top of a module or inside a function) reaches a higher row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"
SOURCES = (ROOT / "kvscribe", ROOT / "backends")


def layer_table(text: str) -> list[tuple[str, list[str]]]:
    """(layer, [paths]) from the top row down: a path ending in / holds a folder's files."""
    start = text.index("| layer |", text.index("## Layers"))
    rows = []
    for line in text[start : text.index("\n\n", start)].splitlines()[2:]:  # header, rule
        name, paths = (cell.strip() for cell in line.strip("|").split("|")[:2])
        rows.append((name, re.findall(r"`((?:kvscribe|backends)/[^`]*)`", paths)))
    return rows


def module_name(path: Path) -> str:
    """The import name of a source file (backends/ installs as kvscribe.backends)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "backends":
        parts.insert(0, "kvscribe")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(path: Path, table: list[tuple[str, list[str]]]) -> int | None:
    """The row of `path`: the most specific entry that names it (a file over its folder)."""
    relative = path.relative_to(ROOT).as_posix()
    best: tuple[int, int] | None = None
    for row, (_, entries) in enumerate(table):
        for entry in entries:
            named = relative.startswith(entry) if entry.endswith("/") else relative == entry
            if named and (best is None or len(entry) > best[1]):
                best = (row, len(entry))
    return None if best is None else best[0]


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Every module name `source` imports, anywhere in it; `from X import Y` counts both X
    and X.Y (Y may be a module); relative imports resolved against `module`."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def upward_imports(files: dict[str, Path], table, texts: dict[str, str] | None = None) -> list[str]:
    """'importer (layer) -> imported (layer)' for each import that reaches a higher row
    (`texts`: a module's source to read instead of its file)."""
    found = []
    for module, path in files.items():
        own = layer_of(path, table)
        text = (texts or {}).get(module) or path.read_text(encoding="utf-8")
        names = imported_names(text, module, path.stem == "__init__")
        for name in names:
            while name and name not in files:  # an attribute: its module
                name = name.rpartition(".")[0]
            if not name or name == module:
                continue
            theirs = layer_of(files[name], table)
            if own is not None and theirs is not None and theirs < own:
                found.append(f"{module} ({table[own][0]}) -> {name} ({table[theirs][0]})")
    return sorted(set(found))


def source_files() -> dict[str, Path]:
    paths = [p for folder in SOURCES for p in folder.rglob("*.py")]
    return {module_name(p): p for p in paths if "__pycache__" not in p.parts}


TABLE = layer_table(ARCHITECTURE.read_text(encoding="utf-8"))


def test_the_table_names_every_layer_from_commands_to_ground():
    names = [name for name, _ in TABLE]
    assert names[0] == "commands" and names[-1] == "ground" and len(names) == len(set(names))
    assert all(entries for _, entries in TABLE), TABLE


def test_every_module_sits_in_a_layer():
    files = source_files()
    assert len(files) > 150  # the walk sees the tree
    assert [m for m, p in files.items() if layer_of(p, TABLE) is None] == []


def test_no_import_runs_up_the_table():
    assert upward_imports(source_files(), TABLE) == []


@pytest.mark.parametrize("where", ["top", "inside a function"])
def test_a_planted_upward_import_is_found(where):
    """The check can fail: the ground's errors module importing the commands, at the top or
    lazily, is reported."""
    files = source_files()
    text = files["kvscribe.errors"].read_text(encoding="utf-8")
    if where == "top":
        text += "\nimport kvscribe.cli.app\n"
    else:
        text += "\n\ndef _late():\n    from kvscribe.cli import app\n    return app\n"
    found = upward_imports(files, TABLE, {"kvscribe.errors": text})
    assert "kvscribe.errors (ground) -> kvscribe.cli.app (commands)" in found
    assert all(line.startswith("kvscribe.errors (ground) -> kvscribe.cli") for line in found)
