"""Profiles: built-ins load, `auto` follows the hardware, users can add and override."""

from __future__ import annotations

import json
import shlex

import pytest

from kvscribe import profile
from kvscribe.errors import ExitCode, UsageError
from kvscribe.kvcache.spec import parse_cross, parse_policy
from kvscribe.machine.hardware import Hardware
from tests.conftest import SAMPLE, run_cli

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
        ('[seed]\nself = "full"\ncolour = "red"', r"\[seed\] must be a table"),
        ('[seed]\ncross = "shared"', r"\[seed\] must be a table with `self`"),
        ('[seed]\nself = "window=0"', r"\[seed\] bad cache policy part"),
        ('[seed]\nself = "full"\ncross = "per-beam"', "unknown cross-attention"),
        # A misspelt section or [kv] key was taken for a plugin's and silently ignored; a
        # [kv] that is not a table was an internal error; a bad [kv] policy blamed a
        # --kv-policy never given, and the ctranslate2 backend ran it as if valid.
        ("[transfomers]\nbeam_size = 1", r"unknown key\(s\) or section\(s\) transfomers"),
        ('[kvv]\nself = "full"', r"section\(s\) kvv"),
        ('kv = "full"', r"`kv` must be a table"),
        ("ctranslate2 = 5", r"`ctranslate2` must be a table"),
        ('[kv]\nselff = "full"', r"unknown key\(s\) selff in \[kv\]"),
        ('[kv]\nself = "window=abc"', r"\[kv\] bad cache policy part"),
        ('[kv]\ncross = "bogus"', r"\[kv\] unknown cross-attention"),
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


def test_a_layer_selector_a_model_lacks_is_blamed_on_where_the_policy_came_from(
    tmp_path, monkeypatch
):
    """Whether a selector picks a layer is known only with the model: from a profile, the
    error named a --kv-policy never given."""
    import dataclasses

    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "deep.toml").write_text('[kv]\nself = "full; q8_0@layers>=9"\n')
    deep = profile.load("deep")  # the syntax is checked at load, the layers here
    with pytest.raises(UsageError, match="selects no layer of this model") as caught:
        deep.self_specs(4)
    line = caught.value.one_line()
    assert "deep.toml" in line and "[kv]" in line and "--kv-policy" not in line, line
    given = dataclasses.replace(deep, kv_from_command_line=True, kv_self_from_command_line=True)
    with pytest.raises(UsageError) as caught:
        given.self_specs(4)
    assert "--kv-policy" in caught.value.one_line()
    assert len(deep.self_specs(12)) == 12  # a model that has layer 9
    shown = run_cli("profiles", "show", "deep")  # its layers, on the default model
    assert shown.code == ExitCode.USAGE, shown.stderr
    assert "deep.toml" in shown.stderr and "--kv-policy" not in shown.stderr, shown.stderr


@pytest.mark.model
def test_a_count_out_of_range_in_a_profile_is_refused_as_its_flag_is(tmp_path, monkeypatch):
    """beam_size = 0 was an internal error (IndexError) or blamed a --beam-size never given;
    cpu_threads = 0 and batch_size = 0 ran as if valid."""
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    for key, value in (("beam_size", 0), ("cpu_threads", 0), ("batch_size", 99)):
        text = f'summary = "odd"\ndevice = "cpu"\n[ctranslate2]\n{key} = {value}\n'
        (tmp_path / "profiles" / "odd.toml").write_text(text)
        result = run_cli(SAMPLE, "-p", "odd", "-q")
        assert result.code == ExitCode.USAGE, result.stderr
        assert f"odd.toml: bad setting [ctranslate2] {key} = {value} (must be between" in (
            result.stderr
        )
    # A choice not among the encoder's: the file was not named.
    (tmp_path / "profiles" / "odd.toml").write_text('[ctranslate2]\nencoder = "foo"\n')
    result = run_cli(SAMPLE, "-p", "odd", "-q")
    assert result.code == ExitCode.USAGE, result.stderr
    said = "odd.toml: bad setting [ctranslate2] encoder = 'foo' (one of auto, onnxruntime,"
    assert said in result.stderr


@pytest.mark.parametrize(
    ("rules", "words"),
    [
        ('no_cuda = "nonexistent"', "no_cuda = 'nonexistent' is not a profile auto can pick"),
        ('no_cuda = "auto"', "no_cuda = 'auto' is not a profile auto can pick"),
        ('small_gpu_max_gb = "4GB"', "small_gpu_max_gb must be a number of GB, not '4GB'"),
        ('nocuda = "gpu"', r"unknown key\(s\) nocuda in \[auto\]"),
    ],
)
def test_a_users_auto_rules_are_checked_naming_its_file(tmp_path, monkeypatch, rules, words):
    """A user's auto.toml picking no profile made every default run fail with
    "nonexistent: unknown profile", its file unnamed; "4GB" was an internal error on a
    CUDA machine only."""
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "auto.toml").write_text(f"[auto]\n{rules}\n")
    for resolve_auto in (True, False):
        with pytest.raises(UsageError, match=words) as caught:
            profile.load("auto", resolve_auto=resolve_auto)
        assert "auto.toml" in caught.value.one_line()


def test_profiles_show_prints_a_users_words_as_written(tmp_path, monkeypatch):
    """Rich read brackets in a user's profile as markup: "[/home]" was an internal error
    (MarkupError), "[bold]" vanished."""
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    text = 'why = "tested on [/home] box, [bold]x"\n[ctranslate2]\ncompute_type = "[/]"\n'
    (tmp_path / "profiles" / "marked.toml").write_text(text)
    shown = run_cli("profiles", "show", "marked")
    assert shown.code == 0, shown.stderr
    assert "why: tested on [/home] box, [bold]x" in shown.stdout
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert ["ctranslate2", "compute_type", "[/]"] in rows


def test_the_list_shows_every_profile_beside_a_broken_one(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "bad.toml").write_text('[kv]\nself = "window=abc"\n')
    listed = run_cli("profiles")
    assert listed.code == ExitCode.USAGE
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line.strip()}
    assert "broken" in rows["bad"] and all(name in rows for name in BUILT_IN)
    assert listed.stderr.startswith(f"kvscribe: error: {tmp_path / 'profiles' / 'bad.toml'}: [kv]")


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(UsageError, match="unknown profile") as caught:
        profile.load("turbo")
    assert "cpu-laptop" in caught.value.one_line()


def test_every_built_in_kv_policy_parses():
    for name in BUILT_IN[1:]:
        p = profile.load(name)
        assert len(parse_policy(p.kv_self, 4)) == 4
        parse_cross(p.kv_cross)


# The seed decision table (docs/profiles.md) beside each built-in profile.

TINY_EN_AND_BASE_DECODER_LAYERS = (4, 6)


@pytest.mark.parametrize("name", BUILT_IN[1:])
def test_every_built_in_seed_policy_parses_for_tiny_en_and_base(name):
    seed = profile.load(name).seed
    assert seed is not None and seed.table
    for layers in TINY_EN_AND_BASE_DECODER_LAYERS:
        assert len(parse_policy(seed.kv_self, layers)) == layers
    parse_cross(seed.kv_cross)


@pytest.mark.parametrize("name", BUILT_IN[1:])
def test_a_profile_says_where_it_agrees_with_its_seed_and_why_it_differs(name):
    p = profile.load(name)
    if profile.seed_agrees(p):
        assert p.seed.agrees
    else:  # the reason quotes the docs table it comes from
        assert "docs/" in p.seed.differs_because


@pytest.mark.parametrize("name", BUILT_IN[1:])
def test_every_why_says_where_it_was_measured_and_which_gpu(name):
    """A figure from a GPU names the card and the page of its measurement; a why that
    speaks of GPUs without one says it was not measured there."""
    why = profile.load(name).why.lower()
    assert "measured on cpu (2 cores, tiny.en" in why
    if "gpu" in why:
        measured = "nvidia h200" in why and "docs/gpu_check.md" in why
        assert measured or "not measured on a gpu" in why


def test_seed_agrees_compares_resolved_policies_not_their_spelling(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.toml").write_text(
        '[kv]\nself = "full; half@layers=odd"\ncross = "shared"\n'
        '[seed]\nself = "half@layers=odd"\ncross = "full,shared"\n'
    )
    assert profile.seed_agrees(profile.load("mine"))
    assert not profile.seed_agrees(profile.load("no-loss"))


@pytest.mark.parametrize("name", BUILT_IN[1:])
def test_profiles_show_prints_the_seed_policy_beside_the_chosen_one_and_why(name):
    p = profile.load(name)
    shown = run_cli("profiles", "show", name)
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert f"  table's version: self {p.seed.kv_self}  |  cross {p.seed.kv_cross}" in lines
    assert f"  this profile:    self {p.kv_self}  |  cross {p.kv_cross}" in lines
    flowed = " ".join(shown.stdout.split())  # rich wraps the prose to the terminal
    assert " ".join(p.seed.differs_because.split()) in flowed
    assert " ".join(p.seed.table.split()) in flowed
    assert f"    {seed_command(p)}" in lines


def seed_command(p) -> str:
    return (
        f"kvscribe FILE --backend transformers --profile {p.name} "
        f"--kv-policy '{p.seed.kv_self}' --kv-cross '{p.seed.kv_cross}'"
    )


@pytest.mark.slow
def test_the_printed_seed_command_runs_the_tables_version_exactly(tmp_path):
    pytest.importorskip("torch")
    seed = profile.load("tiny-vram").seed
    shown = run_cli("profiles", "show", "tiny-vram").stdout.splitlines()
    printed = next(line for line in shown if line.startswith("    kvscribe FILE "))
    args = [str(SAMPLE) if word == "FILE" else word for word in shlex.split(printed)[1:]]
    stats = tmp_path / "stats.json"
    result = run_cli(*args, "--stats-json", stats)
    assert result.code == 0, result.stderr
    settings = json.loads(stats.read_text())["settings"]
    assert settings["self-attn policy"] == seed.kv_self
    assert settings["cross-attn policy"] == parse_cross(seed.kv_cross).describe()
    assert settings["beam size"] == "1"  # the profile's other settings stay


def test_profiles_list_marks_whether_each_profile_uses_its_seed_policy():
    listed = run_cli("profiles")
    assert listed.code == 0 and "vs seed" in listed.stdout
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line.split()}
    for name in BUILT_IN[1:]:
        marker = "same" if profile.seed_agrees(profile.load(name)) else "differs"
        assert f" {marker} " in rows[name]


def test_a_user_profile_without_a_seed_table_loads_and_shows(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCRIBE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "plain.toml").write_text('[kv]\nself = "window=64,sink=4"\n')
    assert profile.load("plain").seed is None
    shown = run_cli("profiles", "show", "plain")
    assert shown.code == 0 and "table's version" not in shown.stdout
    assert "plain" in run_cli("profiles").stdout
