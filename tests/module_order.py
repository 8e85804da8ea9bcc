"""The order the suite's modules are handed to the workers: longest first.

pytest-xdist's `--dist loadscope` gives each worker a whole module at a time, in the
order the modules were collected (`--no-loadscope-reorder` in pyproject.toml; its own
reorder ranks them by test count, which says little of what they cost: the Ray cluster's
twelve tests wait on the clock for minutes, the docs' 123 take a minute). A long module
dealt last runs alone while the other workers idle, so the modules go out longest first,
as ranked in tests/module_order.txt: each module's wall seconds summed over its tests in
a whole-suite run, written by `benchmarks/suite_cpu.py --write-order`. Modules it does not
list (new ones, of unknown cost) go first, in collection order: a short one dealt early
costs nothing, a long one dealt last would run alone. Tests keep their order inside a
module."""

from __future__ import annotations

from pathlib import Path

RANKING = Path(__file__).with_name("module_order.txt")


def read_ranking(path: Path = RANKING) -> list[str]:
    """The modules the file lists, longest first (lines "MODULE SECONDS"; # comments)."""
    if not path.is_file():
        return []
    lines = (line.split("#", 1)[0].split() for line in path.read_text().splitlines())
    return [fields[0] for fields in lines if fields]


def write_ranking(module_seconds: dict[str, float], path: Path = RANKING) -> None:
    header = "# Module, wall seconds summed over its tests: benchmarks/suite_cpu.py --write-order\n"
    ranked = sorted(module_seconds.items(), key=lambda item: item[1], reverse=True)
    path.write_text(header + "".join(f"{name} {seconds:.0f}\n" for name, seconds in ranked))


def longest_first(items: list, ranking: list[str]) -> None:
    """Sort pytest items in place: unranked modules as collected, then ranked ones in rank
    order."""
    rank = {module: place for place, module in enumerate(ranking)}
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(_module(item), len(first_seen))

    def place(item) -> int:
        module = _module(item)
        return rank[module] + len(first_seen) if module in rank else first_seen[module]

    items.sort(key=place)  # stable: a module's tests keep their order


def _module(item) -> str:
    return item.nodeid.split("::", 1)[0]
