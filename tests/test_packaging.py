"""The wheel ships every package: an editable install would hide a missing one."""

from __future__ import annotations

import sys

from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def _installed_name(folder) -> str:
    relative = folder.relative_to(ROOT)
    for package, source in sorted(CONFIG["package-dir"].items(), key=lambda kv: -len(kv[1])):
        if relative.parts[: len(source.split("/"))] == tuple(source.split("/")):
            rest = relative.parts[len(source.split("/")) :]
            return ".".join([package, *rest])
    raise AssertionError(f"{relative} is not under any package-dir")


def test_every_package_folder_is_listed_for_the_wheel():
    folders = [
        p.parent
        for top in ("kvscribe", "backends", "profiles")
        for p in (ROOT / top).rglob("__init__.py")
    ]
    assert sorted(_installed_name(f) for f in folders) == sorted(CONFIG["packages"])


def test_nothing_installs_as_a_top_level_backends_or_profiles_module():
    assert all(name.startswith("kvscribe") for name in CONFIG["packages"])
