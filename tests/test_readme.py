"""The README's commands: the set-up pair is what CI runs, and every example works as written.
Checks every page shares (links, result files, commands that parse) are in test_docs.py."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT
from tests.doc_pages import DOCS, README_EXAMPLES, example_param, links, run_example

README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```sh\n(.*?)```", README, flags=re.S)
SETUP = [line for line in BLOCKS[0].splitlines() + BLOCKS[1].splitlines() if line.strip()]
EXAMPLES = README_EXAMPLES  # the kvscribe lines of the sh blocks after the set-up pair
MAX_LINES = 250


def test_ci_runs_the_readme_setup_commands_verbatim():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert len(SETUP) == 2
    for command in SETUP:
        assert command in ci, f"README command missing from .ci/run: {command}"
    assert "pytest" in SETUP[1] and "samples/jfk.wav" in SETUP[0]


def test_the_readme_has_examples_to_check():
    assert len(EXAMPLES) >= 12


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("command", [example_param(c) for c in EXAMPLES])
def test_readme_example_runs_as_written(command, tmp_path):
    run_example(command, tmp_path)


def test_the_readme_is_short():
    lines = len(README.splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines: move detail into docs/"


def test_the_readme_leads_to_every_docs_page():
    linked = {target.partition("#")[0] for target in links(ROOT / "README.md")}
    pages = {f"docs/{page.name}" for page in DOCS.glob("*.md")}
    assert not sorted(pages - linked), "docs pages the README's 'Where next' does not link"
