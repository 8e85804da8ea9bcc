"""The docs hold to what they say: links resolve, cited result files exist, every command
shown is one the CLI accepts, docs/cli.md is today's --help, and the ```sh examples run.

Conventions the pages follow (docs/development.md): a ```sh block holds commands that run
as written from a folder holding a copy of samples/; a ```text block holds commands that
need what the tests do not have (a microphone, a cluster, your files), which are parsed,
not run; output is shown in an unlabelled ``` block.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.main import get_command

from kvscribe.cli.app import app
from kvscribe.models.embedded import EMBEDDED
from tests.conftest import ROOT

try:  # typer carries its own copy of click
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # pragma: no cover - a typer that uses click itself
    from click.exceptions import UsageError as ClickUsageError

DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
CLI_PAGE = DOCS / "cli.md"  # generated --help output: no commands of its own to check
REGENERATE = ".venv/bin/python docs/make_cli_reference.py"

# Commands shown but not parsed, with the reason: parsing runs a flag's eager callback,
# and this one would install completion into the shell of whoever runs the tests.
NOT_PARSED = {"kvscribe --install-completion": "installs shell completion"}


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
    return list(lexer)


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


README_EXAMPLES = sh_examples(README, skip_blocks=2)  # after the two set-up commands
# Each command once: those the README shows run in test_readme.py.
DOC_EXAMPLES = [
    command
    for command in dict.fromkeys(c for page in PAGES[1:] for c in sh_examples(page))
    if command not in README_EXAMPLES
]


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("command", [example_param(c) for c in DOC_EXAMPLES])
def test_docs_example_runs_as_written(command, tmp_path):
    run_example(command, tmp_path)


# -- commands are valid invocations -----------------------------------------------------

CLI = get_command(app)


def parse(args: list[str]) -> None:
    """Parse `kvscribe ARGS` the way the CLI does, down to the subcommand, without running
    it; a bad flag, value or subcommand raises click's UsageError."""
    command, name, parent = CLI, "kvscribe", None
    while True:
        try:
            context = command.make_context(name, list(args), parent=parent)
        except typer.Exit:  # --help, --version: valid, and done
            return
        if not isinstance(command, TyperGroup):
            return
        rest = [*context._protected_args, *context.args]
        if not rest:  # a group that runs without a subcommand (`kvscribe profiles`)
            return
        name, command, args = command.resolve_command(context, rest)
        parent = context


SHOWN = shown_commands()
COMMANDS = [(w, a) for w, a in SHOWN if shlex.join(["kvscribe", *a]) not in NOT_PARSED]


def test_the_docs_show_commands_to_check():
    assert len(COMMANDS) >= 60 and len(SHOWN) - len(COMMANDS) == len(NOT_PARSED)
    pages = {where.split(":")[0] for where, _ in COMMANDS}
    assert {"README.md", "docs/profiles.md", "docs/live.md", "docs/batch.md"} <= pages


@pytest.mark.parametrize(
    "where, args", COMMANDS, ids=[f"{w} {shlex.join(a)}"[:120] for w, a in COMMANDS]
)
def test_every_command_shown_is_a_valid_invocation(where, args, tmp_path, monkeypatch):
    shown = shlex.join(["kvscribe", *args])
    monkeypatch.chdir(tmp_path)  # paths are parsed against an empty folder
    try:
        parse(args)
    except ClickUsageError as exc:
        pytest.fail(f"{where}: `{shown}` is not a valid invocation: {exc.format_message()}")


@pytest.mark.parametrize(
    "args",
    [
        ["samples/jfk.wav", "--no-such-flag"],
        ["samples/jfk.wav", "--beam-size", "five"],
        ["samples/jfk.wav", "--device", "tpu"],
        ["bench", "--device", "mps"],
        ["profiles", "show"],
        ["profiles", "shwo", "tiny-vram"],
        ["mic", "--live", "--inptu", "x.wav"],
        ["setup", "whisper-cpp", "--jobs", "0"],
    ],
)
def test_the_command_check_rejects_what_the_cli_rejects(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ClickUsageError):
        parse(args)


def test_the_command_check_reads_pipes_redirections_and_aliases(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = "find . -name '*.m4a' | kvscribe --files-from - -o out/ --json > events.jsonl"
    assert invocations(line) == [["--files-from", "-", "-o", "out/", "--json"]]
    assert invocations("pip install . && .venv/bin/kvscribe samples/jfk.wav  # x") == [
        ["samples/jfk.wav"]
    ]
    parse(["talk.wav", "--output_dir", "out", "--word_timestamps", "True"])


# -- links, result files, scripts ------------------------------------------------------


def github_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_fences(page.read_text(encoding="utf-8")):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_anchors_are_the_ones_github_makes(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Live: `kvscribe mic --live`\n\n```sh\n# not a heading\n```\n\n"
        "## When to use `--jobs` and when `--cluster`\n\n### Measured\n\n### Measured\n"
    )
    assert github_anchors(page) == {
        "live-kvscribe-mic---live",
        "when-to-use---jobs-and-when---cluster",
        "measured",
        "measured-1",
    }


_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(page: Path) -> list[str]:
    return _LINK.findall(prose(page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or not file.is_relative_to(ROOT):
            broken.append(f"{target} (no such file in the repository)")
        elif anchor and file.suffix == ".md" and anchor not in github_anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {rel(file)})")
    assert not broken, f"{rel(page)} has broken links: {broken}"


def test_the_pages_have_links_to_check():
    assert sum(len(links(page)) for page in PAGES) >= 60


# A citation names a real file: a placeholder (NAME.md) is in capitals and is not one.
_CITED = re.compile(r"benchmarks/results/[a-z0-9][\w.-]*\.(?:md|json|png)")


def test_every_result_file_cited_is_committed():
    cited = {path for page in PAGES for path in _CITED.findall(page.read_text(encoding="utf-8"))}
    assert len(cited) >= 25, "the pages cite too few result files"
    missing = sorted(path for path in cited if not (ROOT / path).is_file())
    assert not missing, f"the docs cite result files that do not exist: {missing}"


def test_every_result_file_is_cited_somewhere():
    cited = {path for page in PAGES for path in _CITED.findall(page.read_text(encoding="utf-8"))}
    results = ROOT / "benchmarks" / "results"
    committed = {rel(path) for path in results.iterdir() if path.suffix in (".md", ".png")}
    committed |= {"benchmarks/results/readme_example_stats.json"}
    assert not sorted(committed - cited), "result files no page cites"


# Modules the scripts share, not benchmarks of their own; a placeholder (NAME.py) is in capitals.
_HELPERS = {"results_file", "corpus"}
_SCRIPT = re.compile(r"benchmarks/([a-z]\w*)\.py")


def test_every_benchmark_script_named_writes_a_result_file():
    named = {name for page in PAGES for name in _SCRIPT.findall(page.read_text(encoding="utf-8"))}
    scripts = named - _HELPERS
    assert len(scripts) >= 15
    for name in sorted(scripts):
        path = ROOT / "benchmarks" / f"{name}.py"
        assert path.is_file(), f"the docs name benchmarks/{name}.py, which does not exist"
        source = path.read_text(encoding="utf-8")
        assert "results_file.write(" in source, f"benchmarks/{name}.py writes no result file"


# -- the generated CLI reference --------------------------------------------------------


def _reference_module():
    spec = importlib.util.spec_from_file_location(
        "make_cli_reference", DOCS / "make_cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_cli_reference_is_current():
    reference = _reference_module()
    assert reference.COMMAND == REGENERATE
    fresh = reference.render()
    shown = CLI_PAGE.read_text(encoding="utf-8") if CLI_PAGE.exists() else ""
    assert shown == fresh, f"docs/cli.md is stale: run {REGENERATE}"


def test_the_cli_reference_covers_every_command():
    reference = _reference_module()
    paths = reference.commands()
    assert {(), ("transcribe",), ("mic",), ("profiles", "show"), ("setup", "whisper-cpp")} <= set(
        paths
    )
    page = CLI_PAGE.read_text(encoding="utf-8")
    for path in paths:
        assert f"## `{' '.join(('kvscribe', *path))}`" in page
    assert str(ROOT) not in page, "the reference shows a path of this machine"


# -- nothing points outside the repository ----------------------------------------------

# The old eval folder beside the checkout, and design notes users never had. Spelled in
# pieces so that neither this file nor a grep for them finds them here. ("shared" alone is
# a legitimate KV policy name: `--kv-cross shared`.)
_OUTSIDE = re.compile(
    "|".join(re.escape(p) for p in ("../" + "shared", "shared" + "/eval", "DES" + "IGN.md"))
)
_SCANNED = (".py", ".md", ".toml", ".sh", ".tsv")
_NOT_SCANNED = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}


def test_nothing_refers_to_files_outside_the_repository():
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [
            d for d in subfolders if d not in _NOT_SCANNED and not d.endswith(".egg-info")
        ]
        for name in files:
            if not name.endswith(_SCANNED):
                continue
            path = Path(folder) / name
            text = path.read_text(encoding="utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), start=1):
                if _OUTSIDE.search(line):
                    found.append(f"{rel(path)}:{number}: {line.strip()}")
    assert not found, "references to files outside the repository (use eval/, docs/):\n" + (
        "\n".join(found)
    )
