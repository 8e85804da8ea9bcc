"""Hardware profiles: TOML data in profiles/ (built in) and <config dir>/profiles/ (user).

A profile names a device, the decoder KV-cache policy (transformers backend)
and, per backend, the settings that engine can express. `auto` is resolved to
another profile from the hardware found. Backends validate their own section.

A built-in profile also carries `[seed]`: the recommendation of the decision table
the profiles started from (docs/profiles.md, "The seed decision table") written as an
exact policy, and the measured reason the profile differs, so `kvscribe profiles show`
can put the two side by side. User profiles may leave it out.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kvscribe.errors import UsageError
from kvscribe.kvcache.spec import LayerSpec, parse_cross, parse_policy, validate_policy
from kvscribe.machine import hardware
from kvscribe.paths import config_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

AUTO = "auto"
DEVICES = ("auto", "cpu", "cuda", "mps")
_TOP_KEYS = {"name", "summary", "why", "device", "kv", "auto", "seed"}
_SEED_KEYS = {"table", "self", "cross", "agrees", "differs_because"}
# Decoder depths of Whisper tiny, base, small, medium and large: two policies agree
# when they resolve to the same per-layer specs on every one of them.
_WHISPER_DECODER_DEPTHS = (4, 6, 12, 24, 32)


@dataclass(frozen=True)
class Seed:
    """The decision table's recommendation for a profile, and why the profile differs."""

    table: str  # the table's own words, e.g. "sink + sliding window, keep 128-256"
    kv_self: str  # those words as a self-attention policy (kvscribe/kvcache/spec.py)
    kv_cross: str
    agrees: str = ""  # what the profile keeps from the table
    differs_because: str = ""  # the measured reason for the rest


@dataclass(frozen=True)
class Profile:
    name: str
    summary: str
    why: str
    device: str
    kv_self: str
    kv_cross: str
    backends: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: str = ""
    chosen_by: str = ""  # "auto: no CUDA device" when auto picked it
    seed: Seed | None = None
    # --kv-policy / --kv-cross replaced the policy: a backend that cannot honour a part the
    # user asked for by name refuses, rather than noting it as not applicable.
    kv_from_command_line: bool = False
    kv_self_from_command_line: bool = False  # --kv-policy itself (--kv-cross leaves it)
    compute_type_from_command_line: bool = False  # --compute-type replaced the section's

    def settings_for(self, backend: str) -> Mapping[str, Any]:
        return self.backends.get(backend, {})

    def self_specs(self, n_layers: int) -> tuple[LayerSpec, ...]:
        """The self-attention policy per layer of a decoder of `n_layers`. Only here is the
        model known, so a selector that picks none of its layers (q8_0@layers>=9 on a
        4-layer model) is found here, and blamed on where the policy came from: --kv-policy,
        or the profile's file (it named a --kv-policy never given)."""
        try:
            return parse_policy(self.kv_self, n_layers)
        except UsageError as exc:
            if self.kv_self_from_command_line:
                raise
            raise _in_kv_table(exc, self.source or self.name) from exc


def available() -> dict[str, Path | resources.abc.Traversable]:
    """Profile name -> file; a user profile overrides a built-in of the same name."""
    found: dict[str, Any] = {}
    for entry in resources.files("kvscribe.profiles").iterdir():
        if entry.name.endswith(".toml"):
            found[entry.name[:-5]] = entry
    user_dir = config_dir() / "profiles"
    if user_dir.is_dir():
        for path in sorted(user_dir.glob("*.toml")):
            found[path.stem] = path
    return dict(sorted(found.items()))


def load(name: str, *, resolve_auto: bool = True) -> Profile:
    """Load profile `name`; `auto` becomes the profile its rules pick for this machine."""
    files = available()
    if name not in files:
        raise UsageError(
            "unknown profile",
            subject=name,
            hint=f"choose one of: {', '.join(files)} (`kvscribe profiles`)",
        )
    data = _read(files[name], name)
    if name == AUTO:
        _check_auto(data.get("auto", {}), files, str(files[name]))
    if name == AUTO and resolve_auto:
        picked, reason = _pick(data.get("auto", {}), hardware.detect())
        profile = load(picked, resolve_auto=False)
        return Profile(**{**profile.__dict__, "chosen_by": f"auto: {reason}"})
    return _build(name, data, str(files[name]))


def _read(source, name: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(
            f"profile file is not valid TOML: {exc}",
            subject=str(source),
            hint="fix or remove the file",
        ) from exc
    _check_keys(data, name, str(source))
    return data


def _check_keys(data: dict[str, Any], name: str, source: str) -> None:
    """Every key a known one, every backend section a table of a registered backend (a
    misspelt section was taken for a plugin's and its settings silently ignored)."""
    from kvscribe import registry

    backends = set(registry.names())
    unknown = set(data) - _TOP_KEYS - backends
    if unknown:
        raise UsageError(
            f"unknown key(s) or section(s) {', '.join(sorted(unknown))} in profile {name}",
            subject=source,
            hint=f"keys: {', '.join(sorted(_TOP_KEYS - {'kv', 'seed', 'auto'}))}; "
            f"sections: kv, seed, auto and a backend's ({', '.join(sorted(backends))})",
        )
    for section in sorted((backends | {"kv", "auto"}) & set(data)):
        if not isinstance(data[section], dict):
            raise UsageError(
                f"`{section}` must be a table ([{section}] and its keys)",
                subject=source,
                hint=f"write it as [{section}] with one key = value per line",
            )
    _check_kv(data.get("kv", {}), source)


def _check_kv(table: dict[str, Any], source: str) -> None:
    """[kv]: `self` and `cross` only, each a policy that parses (as --kv-policy and
    --kv-cross would), so no backend runs a profile whose cache policy is wrong."""
    unknown = set(table) - {"self", "cross"}
    if unknown:
        raise UsageError(
            f"unknown key(s) {', '.join(sorted(unknown))} in [kv]",
            subject=source,
            hint="[kv] takes self and cross (docs/profiles.md)",
        )
    try:
        validate_policy(str(table.get("self", "full")))
        parse_cross(str(table.get("cross", "full")))
    except UsageError as exc:
        raise _in_kv_table(exc, source) from exc


def _in_kv_table(exc: UsageError, source: str) -> UsageError:
    """A policy's mistake, said of the profile's [kv] table rather than of the flags."""
    return UsageError(f"[kv] {exc.message}", subject=source, hint="fix the profile's [kv] policy")


def _build(name: str, data: dict[str, Any], source: str) -> Profile:
    device = data.get("device", "auto")
    if device not in DEVICES:
        raise UsageError(
            f"device must be one of {', '.join(DEVICES)}, not {device!r}",
            subject=source,
            hint="fix the profile's `device`",
        )
    kv = data.get("kv", {})
    sections = {k: v for k, v in data.items() if k not in _TOP_KEYS}
    return Profile(
        name=name,
        summary=str(data.get("summary", "")),
        why=str(data.get("why", "")),
        device=device,
        kv_self=str(kv.get("self", "full")),
        kv_cross=str(kv.get("cross", "full")),
        backends=sections,
        source=source,
        seed=_seed(data.get("seed"), source),
    )


def _seed(table: Any, source: str) -> Seed | None:
    """The `[seed]` table, its policies checked so `profiles show` never prints one that fails."""
    if table is None:
        return None
    if not isinstance(table, dict) or set(table) - _SEED_KEYS or "self" not in table:
        raise UsageError(
            "[seed] must be a table with `self` and only these keys: "
            + ", ".join(sorted(_SEED_KEYS)),
            subject=source,
            hint="fix or remove the profile's [seed] table",
        )
    seed = Seed(
        table=str(table.get("table", "")),
        kv_self=str(table["self"]),
        kv_cross=str(table.get("cross", "full")),
        agrees=str(table.get("agrees", "")),
        differs_because=str(table.get("differs_because", "")),
    )
    _check_seed_policies(seed, source)
    return seed


def _check_seed_policies(seed: Seed, source: str) -> None:
    try:
        validate_policy(seed.kv_self)
        parse_cross(seed.kv_cross)
    except UsageError as exc:
        raise UsageError(
            f"[seed] {exc.message}", subject=source, hint="fix the profile's [seed] policy"
        ) from exc


def seed_agrees(profile: Profile) -> bool:
    """Whether the profile's policies resolve exactly as its seed's on every Whisper size."""
    seed = profile.seed
    if seed is None:
        return False
    try:
        same_self = all(
            parse_policy(profile.kv_self, n) == parse_policy(seed.kv_self, n)
            for n in _WHISPER_DECODER_DEPTHS
        )
        return same_self and parse_cross(profile.kv_cross) == parse_cross(seed.kv_cross)
    except UsageError:  # one of them does not fit some Whisper size: not the same policy
        return False


_AUTO_PICKS = ("no_cuda", "small_gpu", "large_gpu")


def _check_auto(rules: Mapping[str, Any], files: Mapping[str, Any], source: str) -> None:
    """[auto]: each pick a profile that exists (not auto itself), the limit a number of GB."""
    unknown = set(rules) - set(_AUTO_PICKS) - {"small_gpu_max_gb"}
    if unknown:
        raise UsageError(
            f"unknown key(s) {', '.join(sorted(unknown))} in [auto]",
            subject=source,
            hint=f"[auto] takes {', '.join(_AUTO_PICKS)} and small_gpu_max_gb",
        )
    for key in _AUTO_PICKS:
        picked = rules.get(key)
        if picked is not None and (picked not in files or picked == AUTO):
            raise UsageError(
                f"[auto] {key} = {picked!r} is not a profile auto can pick",
                subject=source,
                hint=f"choose one of: {', '.join(n for n in files if n != AUTO)}",
            )
    limit = rules.get("small_gpu_max_gb", 4)
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0:
        raise UsageError(
            f"[auto] small_gpu_max_gb must be a number of GB, not {limit!r}",
            subject=source,
            hint="write it as a number, e.g. small_gpu_max_gb = 4",
        )


def _pick(rules: Mapping[str, Any], found: hardware.Hardware) -> tuple[str, str]:
    if not found.has_cuda:
        return rules.get("no_cuda", "cpu-laptop"), found.describe()
    limit = float(rules.get("small_gpu_max_gb", 4))
    memory = found.cuda_memory_gb
    if memory is None or memory <= limit:  # unknown memory: assume the small card
        return rules.get("small_gpu", "tiny-vram"), found.describe()
    return rules.get("large_gpu", "gpu"), found.describe()


def pick_device(profile: Profile, requested: str | None, found: hardware.Hardware) -> str:
    """The device to run on: --device, else the profile's, `auto` meaning CUDA when present."""
    device = requested or profile.device
    if device == "auto":
        return "cuda" if found.has_cuda else "cpu"
    return device
