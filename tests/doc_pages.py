"""Reading the docs' pages: fenced blocks, prose, links, the kvscribe commands they show,
and running a shown example for real. Shared by tests/test_docs.py and tests/test_readme.py.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvscribe.models.embedded import EMBEDDED
from tests.conftest import ROOT

DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
CLI_PAGE = DOCS / "cli.md"  # generated --help output: no commands of its own to check


def cli_reference_module():
    """docs/make_cli_reference.py, loaded (docs/ is no package): its command walk and page."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_cli_reference", DOCS / "make_cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# -- reading the pages ------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(`{3,})\s*([\w-]*)\s*$")


def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """Every fenced code block: (language, line number of its first line, its lines)."""
    blocks: list[tuple[str, int, list[str]]] = []
    fence, language, start, body = None, "", 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence, language, start, body = match.group(1), match.group(2), number + 1, []
        elif match and match.group(1).startswith(fence) and not match.group(2):
            blocks.append((language, start, body))
            fence = None
        else:
            body.append(line)
    return blocks


def outside_fences(text: str) -> list[str]:
    """The page's lines that are not in a fenced block."""
    lines, inside = [], None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if inside is None and match:
            inside = match.group(1)
        elif inside is not None and match and match.group(1).startswith(inside):
            inside = None
        elif inside is None:
            lines.append(line)
    return lines


def prose(text: str) -> str:
    """The page without its fenced blocks and code spans: where links are links."""
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "code", "\n".join(outside_fences(text)))


def shell_words(line: str) -> list[str]:
    """A shell line as words, with operators (|, >, &&, ...) as words of their own and
    comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return _substituted(list(lexer))


def _substituted(words: list[str]) -> list[str]:
    """A process substitution, `<(ffmpeg ...)`, is one word: the pipe bash passes."""
    out, depth = [], 0
    for word in words:
        if word == "<(":
            depth += 1
            if depth == 1:
                out.append("/dev/fd/63")
        elif depth and word == ")":
            depth -= 1
        elif not depth:
            out.append(word)
    return out


_SEPARATORS = {"|", "||", "&&", ";", "&"}


def invocations(line: str) -> list[list[str]]:
    """The arguments of each `kvscribe` in a shell line (after pipes and `&&` too), cut at
    a redirection (`> file`)."""
    found, segment = [], []
    for word in [*shell_words(line), ";"]:
        if word not in _SEPARATORS:
            segment.append(word)
            continue
        if segment and Path(segment[0]).name == "kvscribe":
            args = segment[1:]
            cut = next((i for i, w in enumerate(args) if set(w) <= set("<>&")), len(args))
            found.append(args[:cut])
        segment = []
    return found


def shown_commands() -> list[tuple[str, list[str]]]:
    """(page:line, arguments) of every kvscribe command in a sh or text block."""
    commands = []
    for page in PAGES:
        if page == CLI_PAGE:
            continue
        for language, start, body in fenced_blocks(page.read_text(encoding="utf-8")):
            if language not in ("sh", "text"):
                continue
            for offset, line in enumerate(body):
                for args in invocations(line):
                    commands.append((f"{rel(page)}:{start + offset}", args))
    return commands


def sh_examples(page: Path, skip_blocks: int = 0) -> list[str]:
    """The `kvscribe ...` lines of a page's sh blocks (after the first `skip_blocks`), as
    the shell runs them: a trailing comment is the shell's business."""
    text = page.read_text(encoding="utf-8")
    sh = [body for language, _, body in fenced_blocks(text) if language == "sh"]
    return [
        line.split("  #")[0].strip()
        for body in sh[skip_blocks:]
        for line in body
        if line.startswith("kvscribe ") and "--install-completion" not in line
    ]


# -- running an example for real --------------------------------------------------------


def example_param(command: str):
    """A real run of `command`, in the lanes it needs (tests/conftest.py)."""
    marks = [pytest.mark.slow, pytest.mark.model]
    if "--backend transformers" in command:
        marks.append(pytest.mark.transformers)
    if "--backend whispercpp" in command or "setup whisper-cpp" in command:
        marks.append(pytest.mark.whispercpp)
    return pytest.param(command, marks=marks, id=command)


def run_example(command: str, folder: Path) -> None:
    """Run `command` with bash in `folder`, which gets a copy of samples/; it must exit 0."""
    if "--model base" in command and not EMBEDDED["base"].installed():
        pytest.skip("the base extra is not installed")
    shutil.copytree(ROOT / "samples", folder / "samples")
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.run(
        ["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(page: Path) -> list[str]:
    return _LINK.findall(prose(page.read_text(encoding="utf-8")))


README_EXAMPLES = sh_examples(README, skip_blocks=2)  # after the two set-up commands
