"""tests/module_order.py: the workers take the longest modules first."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from tests.conftest import ROOT
from tests.module_order import longest_first, read_ranking, write_ranking


def _items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


def test_unranked_modules_go_first_then_ranked_ones_and_a_module_keeps_its_tests_order():
    items = _items(
        "tests/a.py::x",
        "tests/a.py::y",
        "tests/new.py::n",
        "tests/b.py::z[1]",
        "tests/b.py::z[2]",
        "tests/c.py::w",
    )
    longest_first(items, ["tests/c.py", "tests/b.py", "tests/gone.py"])
    assert [item.nodeid for item in items] == [
        "tests/a.py::x",
        "tests/a.py::y",
        "tests/new.py::n",  # unranked, as collected
        "tests/c.py::w",
        "tests/b.py::z[1]",
        "tests/b.py::z[2]",  # ranked, in rank order
    ]


def test_the_ranking_is_written_longest_first_and_read_back(tmp_path):
    path = tmp_path / "order.txt"
    write_ranking({"tests/short.py": 3.2, "tests/long.py": 250.4, "tests/mid.py": 40.0}, path)
    assert read_ranking(path) == ["tests/long.py", "tests/mid.py", "tests/short.py"]
    assert read_ranking(tmp_path / "absent.txt") == []


def test_the_committed_ranking_names_each_existing_module_once():
    ranking = read_ranking()
    assert len(ranking) > 50 and len(set(ranking)) == len(ranking)
    assert [name for name in ranking if not (ROOT / name).is_file()] == []


def test_the_suite_collects_in_the_rankings_order():
    quickest = read_ranking()[-3:]  # named in reverse: collected in rank order all the same
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0"]
    argv += ["-p", "no:cacheprovider", *reversed(quickest)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]
    assert list(dict.fromkeys(lines)) == quickest
