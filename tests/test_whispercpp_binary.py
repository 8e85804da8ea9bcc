"""Finding whisper-cli: KVSCRIBE_WHISPER_CLI, the config file, PATH, kvscribe's own build,
and what `kvscribe setup whisper-cpp` does with each."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from kvscribe.backends.whispercpp import binary
from kvscribe.errors import BackendUnavailableError
from tests.conftest import SAMPLE, run_cli

pytestmark = [pytest.mark.whispercpp]


def test_env_var_to_a_missing_binary_is_exit_6(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCRIBE_WHISPER_CLI", str(tmp_path / "whisper-cli"))
    result = run_cli(SAMPLE, "-b", "whispercpp")
    assert result.code == 6
    assert "no such file" in result.stderr and "kvscribe setup whisper-cpp" in result.stderr


def test_config_file_names_the_binary(whisper_cli, monkeypatch, tmp_path):
    monkeypatch.delenv("KVSCRIBE_WHISPER_CLI")
    monkeypatch.setenv("PATH", "/nonexistent")
    config = Path(os.environ["KVSCRIBE_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(f'[whispercpp]\nbinary = "{whisper_cli}"\n')
    try:
        found = binary.find()
        assert found.path == whisper_cli and found.found_by == "config"
    finally:
        (config / "config.toml").unlink()
    with pytest.raises(BackendUnavailableError, match="whisper-cli not found"):
        binary.find()


def test_an_old_whisper_cli_on_path_is_skipped_with_the_reason(monkeypatch, tmp_path):
    # Fault injection: an old whisper.cpp cannot be had here, so a script plays one.
    old = tmp_path / "whisper-cli"
    old.write_text(
        "#!/bin/sh\n"
        "echo 'usage: whisper-cli [options] file0.wav'\n"
        "echo '  -m FNAME, --model FNAME'\n"
    )
    old.chmod(0o755)
    monkeypatch.delenv("KVSCRIBE_WHISPER_CLI")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendUnavailableError, match="too old: its --help lacks -ojf"):
        binary.find()


def test_setup_reuses_a_usable_binary(whisper_cli):
    result = run_cli("setup", "whisper-cpp")
    assert result.code == 0 and "nothing to do" in result.stderr
    assert result.stdout.strip() == str(whisper_cli)


def test_setup_without_cmake_says_what_to_install(monkeypatch):
    monkeypatch.delenv("KVSCRIBE_WHISPER_CLI")
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no cmake, no compiler
    result = run_cli("setup", "whisper-cpp", "--force")
    assert result.code == 6
    assert "cmake" in result.stderr and "apt-get install cmake g++" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "text",
    [
        'whispercpp = "x"',
        "[whispercpp]\nbinary = 5",
        '[whispercpp]\nbinaryy = "/usr/bin/whisper-cli"',
        "[whispercpp]",
    ],
)
def test_a_config_file_not_naming_a_binary_is_one_line_naming_it(text, monkeypatch, tmp_path):
    """A section that is not a table, a binary that is not a string: internal errors
    (AttributeError, TypeError); a misspelt key was ignored."""
    monkeypatch.delenv("KVSCRIBE_WHISPER_CLI")
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "config.toml").write_text(text + "\n")
    with pytest.raises(BackendUnavailableError, match=r"not \[whispercpp\] binary = ") as caught:
        binary.find()
    assert "config.toml" in caught.value.one_line()
    (tmp_path / "config.toml").write_bytes(b'[whispercpp]\nbinary = "\xff"\n')  # not UTF-8
    with pytest.raises(BackendUnavailableError, match="cannot read config"):
        binary.find()


def test_setup_with_a_broken_chosen_binary_says_so_instead_of_building(monkeypatch, tmp_path):
    """A build would never be used while KVSCRIBE_WHISPER_CLI names another whisper-cli:
    set-up started one (minutes), and the backend stayed unavailable after it."""
    broken = tmp_path / "whisper-cli"
    broken.write_text("not a program")
    monkeypatch.setenv("KVSCRIBE_WHISPER_CLI", str(broken))
    result = run_cli("setup", "whisper-cpp", "--force")
    assert result.code == 6, result.stderr
    assert f"{broken} (KVSCRIBE_WHISPER_CLI): not executable" in result.stderr
    assert "unset KVSCRIBE_WHISPER_CLI" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_build_of_earlier_patches_is_named_not_called_missing(whisper_cli, monkeypatch, tmp_path):
    """A build of another version or of earlier patches stays in the cache under its own
    key, and is not run: the error says set-up will build this version's."""
    monkeypatch.delenv("KVSCRIBE_WHISPER_CLI")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(tmp_path))
    with pytest.raises(BackendUnavailableError, match="none on PATH, no kvscribe build"):
        binary.find()
    earlier = binary.own_build_dir().parent / "v1.8.4-kv0123456789ab-x86_64"
    earlier.mkdir(parents=True)
    shutil.copy2(whisper_cli, earlier / whisper_cli.name)
    assert binary.earlier_builds() == [earlier]
    with pytest.raises(BackendUnavailableError, match="build is of an earlier version"):
        binary.find()
