"""The docs hold to what they say: links resolve, cited result files exist, every command
shown is one the CLI accepts, docs/cli.md is today's --help, and the ```sh examples run.

Conventions the pages follow (docs/development.md): a ```sh block holds commands that run
as written from a folder holding a copy of samples/; a ```text block holds commands that
need what the tests do not have (a microphone, a cluster, your files), which are parsed,
not run; output is shown in an unlabelled ``` block.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.main import get_command

from kvscribe.cli.app import app
from tests.conftest import ROOT
from tests.doc_pages import (
    CLI_PAGE,
    PAGES,
    README_EXAMPLES,
    cli_reference_module,
    example_param,
    invocations,
    links,
    outside_fences,
    rel,
    run_example,
    sh_examples,
    shown_commands,
)

REGENERATE = ".venv/bin/python docs/make_cli_reference.py"

try:  # typer carries its own copy of click
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # pragma: no cover - a typer that uses click itself
    from click.exceptions import UsageError as ClickUsageError

# Commands shown but not parsed, with the reason: parsing runs a flag's eager callback,
# and this one would install completion into the shell of whoever runs the tests.
NOT_PARSED = {"kvscribe --install-completion": "installs shell completion"}


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
    assert invocations("kvscribe <(ffmpeg -i a.mp4 -f wav -) -f srt > a.srt") == [
        ["/dev/fd/63", "-f", "srt"]
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


@pytest.mark.slow
def test_the_cli_reference_is_current():
    reference = cli_reference_module()
    assert reference.COMMAND == REGENERATE
    fresh = reference.render()
    shown = CLI_PAGE.read_text(encoding="utf-8") if CLI_PAGE.exists() else ""
    assert shown == fresh, f"docs/cli.md is stale: run {REGENERATE}"


def test_the_cli_reference_covers_every_command():
    reference = cli_reference_module()
    paths = reference.commands()
    assert {(), ("transcribe",), ("mic",), ("profiles", "show"), ("setup", "whisper-cpp")} <= set(
        paths
    )
    page = CLI_PAGE.read_text(encoding="utf-8")
    for path in paths:
        assert f"## `{' '.join(('kvscribe', *path))}`" in page
    assert str(ROOT) not in page, "the reference shows a path of this machine"


def test_every_command_s_summary_is_one_line():
    """The command lists show a summary's first line break as it is: "(WER, KV" on a line of
    its own, then "bytes, speed).", in `kvscribe --help`."""
    reference = cli_reference_module()
    for path in reference.commands():
        command = CLI
        for name in path:
            command = command.commands[name]
        summary = (command.help or "").strip().split("\n\n")[0]
        assert summary and "\n" not in summary, (path, summary)


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
