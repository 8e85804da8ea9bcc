"""Find a usable whisper-cli: KVSCRIBE_WHISPER_CLI, the config file, PATH, kvscribe's own build.

"Usable" means its --help lists every flag kvscribe passes (whisper.cpp 1.8 has
them all); an older binary on PATH is skipped with the reason kept for the error.
Whether it also takes KV cache types (-kvs / -kvc, kvscribe's patched build) is read
from the same --help: a binary without them still runs, at F16.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kvscribe.errors import BackendUnavailableError, KvscribeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
from kvscribe.paths import cache_dir, config_dir

WHISPER_CPP_VERSION = "1.8.5"  # the source inside the sdist below
SOURCE_PACKAGE = "pywhispercpp==1.5.1"
ENV_VAR = "KVSCRIBE_WHISPER_CLI"
REQUIRED_FLAGS = ("-ojf", "-mc", "-bs", "-bo", "-fa", "-nfa", "-ng", "-t", "-of", "-l", "-tr")
KV_TYPE_FLAGS = ("-kvs", "-kvc")  # kvscribe's patch: self / cross KV cache types
QUANTIZE_TOOL = "whisper-quantize"
SETUP_HINT = f"run `kvscribe setup whisper-cpp`, or set {ENV_VAR} to a whisper-cli binary"


@dataclass(frozen=True)
class WhisperCli:
    path: Path
    found_by: str  # "KVSCRIBE_WHISPER_CLI", "config", "PATH", "kvscribe build"
    kv_types: bool = False  # takes -kvs / -kvc (F16, Q8_0, Q4_0 caches)


def own_build_dir() -> Path:
    """Where `kvscribe setup whisper-cpp` installs, keyed by whisper.cpp version, kvscribe's
    patches (a changed patch is a new directory, so it is rebuilt) and CPU."""
    from kvscribe.backends.whispercpp.patching import patches_digest

    key = f"v{WHISPER_CPP_VERSION}-kv{patches_digest()}-{platform.machine().lower()}"
    return cache_dir() / "whisper.cpp" / key


def own_build_path() -> Path:
    return own_build_dir() / ("whisper-cli.exe" if os.name == "nt" else "whisper-cli")


def find() -> WhisperCli:
    """The whisper-cli to run, or BackendUnavailableError saying what was tried and the fix."""
    problems: list[str] = []
    for path, found_by, explicit in _candidates():
        problem = check(path)
        if problem is None:
            return WhisperCli(path, found_by, takes_kv_types(path))
        if explicit:  # the user named it: do not silently run another one
            raise BackendUnavailableError(problem, subject=f"{path} ({found_by})", hint=SETUP_HINT)
        problems.append(f"{path}: {problem}")
    own = "kvscribe's build is of an earlier version" if earlier_builds() else "no kvscribe build"
    tried = "; ".join(problems) if problems else f"none on PATH, {own}"
    raise BackendUnavailableError(f"whisper-cli not found ({tried})", hint=SETUP_HINT)


def earlier_builds() -> list[Path]:
    """kvscribe's builds of other whisper.cpp versions or patches, still in the cache."""
    folder = own_build_dir()
    return sorted(
        path
        for path in folder.parent.glob("v*-kv*")
        if path.is_dir() and path != folder and (path / own_build_path().name).exists()
    )


def check_explicit() -> None:
    """BackendUnavailableError where KVSCRIBE_WHISPER_CLI or the config names a whisper-cli
    kvscribe cannot drive: it is run before any other, so a build would never be used."""
    path, found_by, explicit = next(_candidates(), (None, "", False))
    problem = check(path) if explicit else None
    if problem is not None:
        raise BackendUnavailableError(
            f"{problem}; it is used before any build",
            subject=f"{path} ({found_by})",
            hint=f"fix it, or unset {ENV_VAR} / remove the config's binary and run "
            "`kvscribe setup whisper-cpp` again",
        )


def patched() -> WhisperCli | None:
    """The whisper-cli found, if it takes kvscribe's KV cache types (else: none; set-up
    builds one)."""
    try:
        found = find()
    except KvscribeError:
        return None
    return found if found.kv_types else None


def _candidates():
    """The user's explicit choice first; then kvscribe's own build (the one with quantized KV
    caches, which `kvscribe setup whisper-cpp` made on purpose), then PATH."""
    env = os.environ.get(ENV_VAR)
    if env:
        yield Path(env), ENV_VAR, True
    configured = _configured()
    if configured is not None:
        yield configured, "config", True
    own = own_build_path()
    if own.exists():
        yield own, "kvscribe build", False
    on_path = shutil.which("whisper-cli")
    if on_path:
        yield Path(on_path), "PATH", False


def _configured() -> Path | None:
    """`[whispercpp] binary = "/path/to/whisper-cli"` in <config dir>/config.toml."""
    config = config_dir() / "config.toml"
    if not config.is_file():
        return None
    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BackendUnavailableError(
            f"cannot read config: {exc}", subject=str(config), hint="fix or remove the file"
        ) from None
    if "whispercpp" not in data:
        return None
    section = data["whispercpp"]
    value = section.get("binary") if isinstance(section, dict) else None
    if not isinstance(section, dict) or set(section) != {"binary"} or not isinstance(value, str):
        raise BackendUnavailableError(
            'the config\'s whisper.cpp setting is not [whispercpp] binary = "PATH"',
            subject=str(config),
            hint='write [whispercpp] and on the next line binary = "/path/to/whisper-cli", '
            "or remove the file",
        )
    return Path(value).expanduser() if value else None


def check(path: Path) -> str | None:
    """None if `path` is a whisper-cli kvscribe can drive, else why not (one line)."""
    if not path.is_file():
        return "no such file"
    if not os.access(path, os.X_OK):
        return "not executable (chmod +x it)"
    stat = path.stat()
    return _check_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def takes_kv_types(path: Path) -> bool:
    """Whether this (usable) whisper-cli lists kvscribe's -kvs and -kvc in its --help."""
    stat = path.stat()
    usage = _usage_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    return isinstance(usage, str) and not _lacking(usage, KV_TYPE_FLAGS)


def quantize_tool(cli: WhisperCli) -> Path | None:
    """whisper.cpp's weight quantizer: beside this whisper-cli, else kvscribe's build, else
    on PATH; None if there is none."""
    for candidate in (cli.path.parent / QUANTIZE_TOOL, own_build_dir() / QUANTIZE_TOOL):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which(QUANTIZE_TOOL)
    return Path(on_path) if on_path else None


def _check_cached(path: str, size: int, mtime_ns: int) -> str | None:
    usage = _usage_cached(path, size, mtime_ns)
    if isinstance(usage, OSError | subprocess.TimeoutExpired):
        return f"does not run ({usage})"
    if "--model" not in usage:
        return "does not look like whisper-cli (no --model in its --help)"
    missing = _lacking(usage, REQUIRED_FLAGS)
    if missing:
        return f"too old: its --help lacks {', '.join(missing)} (whisper.cpp 1.8 or newer needed)"
    return None


@functools.lru_cache(maxsize=8)
def _usage_cached(path: str, size: int, mtime_ns: int) -> str | OSError | subprocess.TimeoutExpired:
    """The binary's --help text (keyed by size and mtime: a rebuilt binary is asked again)."""
    try:
        done = subprocess.run(
            [path, "--help"], capture_output=True, timeout=20, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return exc
    return (done.stdout + done.stderr).decode("utf-8", errors="replace")


def _lacking(usage: str, flags: tuple[str, ...]) -> list[str]:
    return [f for f in flags if not re.search(rf"^\s*{re.escape(f)}[\s,]", usage, re.M)]
