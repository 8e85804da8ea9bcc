"""Profiles: built-ins load, `auto` follows the hardware, users can add and override."""

from __future__ import annotations

import pytest

from kvscribe import profile
from kvscribe.errors import ExitCode, UsageError
from kvscribe.hardware import Hardware

BUILT_IN = ("auto", "cpu-laptop", "gpu", "no-loss", "tiny-vram")


def test_every_built_in_profile_loads_with_a_why_and_backend_settings():
    assert tuple(profile.available()) == BUILT_IN
    for name in BUILT_IN[1:]:
        p = profile.load(name)
        assert p.why and p.summary and p.device in profile.DEVICES
        assert set(p.backends) >= {"ctranslate2", "transformers", "whispercpp"}


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (Hardware(0, None), "cpu-laptop"),
        (Hardware(1, 4.0), "tiny-vram"),
        (Hardware(1, None), "tiny-vram"),
        (Hardware(2, 24.0), "gpu"),
    ],
)
def test_auto_picks_by_hardware(found, expected):
    rules = profile._read(profile.available()["auto"], "auto")["auto"]
    assert profile._pick(rules, found)[0] == expected


def test_auto_resolves_to_a_real_profile_and_says_why():
    chosen = profile.load("auto")
    assert chosen.name in BUILT_IN[1:] and chosen.chosen_by.startswith("auto: ")


def test_pick_device():
    p = profile.load("no-loss")
    assert profile.pick_device(p, None, Hardware(0, None)) == "cpu"
    assert profile.pick_device(p, None, Hardware(1, 8.0)) == "cuda"
    assert profile.pick_device(p, "cpu", Hardware(1, 8.0)) == "cpu"


def test_user_profile_is_listed_and_overrides_a_built_in(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "studio.toml").write_text(
        'summary = "my box"\nwhy = "because"\ndevice = "cpu"\n[ctranslate2]\nbeam_size = 2\n'
    )
    (tmp_path / "profiles" / "gpu.toml").write_text('summary = "mine"\ndevice = "cpu"\n')
    assert "studio" in profile.available()
    assert profile.load("studio").settings_for("ctranslate2") == {"beam_size": 2}
    assert profile.load("gpu").summary == "mine"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("device = [", "not valid TOML"),
        ('device = "tpu"', "device must be one of"),
        ('colour = "red"', "unknown key"),
    ],
)
def test_bad_user_profiles_are_usage_errors_naming_the_file(tmp_path, monkeypatch, text, words):
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "broken.toml").write_text(text)
    with pytest.raises(UsageError, match=words) as caught:
        profile.load("broken")
    assert "broken.toml" in caught.value.one_line()
    assert caught.value.exit_code == ExitCode.USAGE


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(UsageError, match="unknown profile") as caught:
        profile.load("turbo")
    assert "cpu-laptop" in caught.value.one_line()


def test_every_built_in_kv_policy_parses():
    from kvscribe.kvcache.spec import parse_cross, parse_policy

    for name in BUILT_IN[1:]:
        p = profile.load(name)
        assert len(parse_policy(p.kv_self, 4)) == 4
        parse_cross(p.kv_cross)
