"""The README's commands: the set-up pair is what CI runs, and every example works as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from kvscribe.models.embedded import EMBEDDED
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```sh\n(.*?)```", README, flags=re.S)
SETUP = [line for line in BLOCKS[0].splitlines() + BLOCKS[1].splitlines() if line.strip()]
EXAMPLES = [
    line.split("  #")[0].strip()
    for block in BLOCKS[2:]
    for line in block.splitlines()
    if line.startswith("kvscribe ") and "--install-completion" not in line
]


def test_ci_runs_the_readme_setup_commands_verbatim():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert len(SETUP) == 2
    for command in SETUP:
        assert command in ci, f"README command missing from .ci/run: {command}"
    assert "pytest" in SETUP[1] and "samples/jfk.wav" in SETUP[0]


def test_the_readme_has_examples_to_check():
    assert len(EXAMPLES) >= 8


@pytest.mark.parametrize("command", EXAMPLES)
def test_readme_example_runs_as_written(command, tmp_path):
    if "--model base" in command and not EMBEDDED["base"].installed():
        pytest.skip("the base extra is not installed")
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_result_file_the_readme_cites_is_committed():
    cited = set(re.findall(r"benchmarks/results/[\w.-]+\.(?:md|json|png)", README))
    assert cited, "the README cites no result file"
    missing = sorted(path for path in cited if not (ROOT / path).is_file())
    assert not missing, f"README cites result files that do not exist: {missing}"


def test_every_benchmark_script_the_readme_names_writes_a_result_file():
    scripts = set(re.findall(r"benchmarks/(\w+)\.py", README))
    assert scripts
    for name in sorted(scripts):
        source = (ROOT / "benchmarks" / f"{name}.py").read_text(encoding="utf-8")
        assert "results_file.write(" in source, f"benchmarks/{name}.py writes no result file"
