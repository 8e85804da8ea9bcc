"""A real install: the wheel built from this tree, installed (not editable) into a fresh
venv, runs from a folder outside the repo. The editable install of the development venv
would hide a file missing from the wheel; this test would not.

No network: the wheel is built without build isolation (setuptools is in the development
venv), and the fresh venv sees the development venv's dependencies through a .pth file
naming a folder of links to them, every one but kvscribe's own (its editable finder and its
metadata, whose entry points would register the repo's backends)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from kvscribe.backends.whispercpp import patching
from tests.conftest import FOX, FOX_TEXT, ROOT, wer

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = [pytest.mark.slow, pytest.mark.model]

SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
    "setuptools"
]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy of what pyproject.toml builds from, so the repo gets no build/."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in sorted(set(SETUPTOOLS["package-dir"].values())):
        shutil.copytree(ROOT / folder, source / folder, ignore=junk)
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    _check([*pip, "-w", out, source], cwd=source)
    (built,) = out.glob("kvscribe-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed and the dependencies linked in."""
    home = tmp_path_factory.mktemp("venv") / "venv"
    _check([sys.executable, "-m", "venv", "--without-pip", home])
    python = home / "bin" / "python"
    site = Path(_check([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]))
    deps = home / "deps"
    deps.mkdir()
    ours = ("kvscribe", "__editable__", "__pycache__")
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not entry.name.startswith(ours) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    (site / "development-venv-deps.pth").write_text(f"{deps}\n")
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index"]
    _check([*pip, "-q", wheel])
    return home


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    """A working folder outside the repo: nothing there to import kvscribe from."""
    folder = tmp_path / "work"
    folder.mkdir()
    assert ROOT not in folder.parents
    return folder


def _check(argv: list, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout.strip()


def _package_data(root: Path) -> set[str]:
    """Every non-Python file of the source packages, by its installed path (kvscribe/...)."""
    installed = set()
    for package, folder in SETUPTOOLS["package-dir"].items():
        for path in (root / folder).rglob("*"):
            if path.is_file() and path.suffix not in (".py", ".pyc"):
                relative = path.relative_to(root / folder).as_posix()
                installed.add(f"{package.replace('.', '/')}/{relative}")
    return installed


def test_the_wheel_holds_every_data_file_of_the_source(wheel):
    data = _package_data(ROOT)
    patch = "kvscribe/backends/whispercpp/kv-cache-types.patch"
    assert {"kvscribe/profiles/auto.toml", patch} <= data
    with zipfile.ZipFile(wheel) as archive:
        missing = data - set(archive.namelist())
    assert not missing, f"not in the wheel (pyproject.toml's package-data): {sorted(missing)}"


@pytest.mark.slow
def test_installed_kvscribe_is_the_wheels_and_transcribes_from_any_folder(venv, elsewhere):
    python = venv / "bin" / "python"
    where = _check([python, "-c", "import kvscribe; print(kvscribe.__file__)"], cwd=elsewhere)
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(ROOT)
    shutil.copy(FOX, elsewhere / "speech.wav")
    transcript = _check([venv / "bin" / "kvscribe", "speech.wav", "-f", "txt"], cwd=elsewhere)
    assert wer(FOX_TEXT, transcript) <= 0.15, transcript
    _check([venv / "bin" / "kvscribe", "speech.wav", "-o", "out", "-f", "txt", "-q"], elsewhere)
    assert wer(FOX_TEXT, (elsewhere / "out" / "speech.txt").read_text()) <= 0.15


@pytest.mark.slow
def test_installed_profiles_patches_and_backends_come_with_the_wheel(venv, elsewhere):
    listed = _check([venv / "bin" / "kvscribe", "profiles"], cwd=elsewhere)
    for profile in (ROOT / "profiles").glob("*.toml"):
        assert profile.stem in listed
    backends = _check([venv / "bin" / "kvscribe", "backends"], cwd=elsewhere)
    assert "ctranslate2" in backends and "whispercpp" in backends
    probe = (
        "from kvscribe.backends.whispercpp.patching import PATCHES, patch_texts; "
        "from importlib import resources; "
        "print(resources.files('kvscribe.backends.whispercpp')); "
        "print(sorted(patch_texts()) == sorted(PATCHES))"
    )
    folder, complete = _check([venv / "bin" / "python", "-c", probe], cwd=elsewhere).splitlines()
    assert Path(folder).is_relative_to(venv) and complete == "True"
    shipped = sorted((ROOT / "backends" / "whispercpp").glob("*.patch"))
    assert [patch.name for patch in shipped] == sorted(patching.PATCHES)
    for patch in shipped:
        assert (Path(folder) / patch.name).read_bytes() == patch.read_bytes()


def test_every_source_package_is_listed_for_the_wheel():
    """pyproject.toml lists packages by hand (backends/ and profiles/ install inside
    kvscribe): a package folder missing from the list works in the editable install the
    tests use and is absent from the wheel a user installs."""
    listed = set(SETUPTOOLS["packages"])
    found = set()
    for package, folder in SETUPTOOLS["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    assert "kvscribe.backends.whispercpp" in found
    assert sorted(found - listed) == []
