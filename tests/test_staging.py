"""kvscribe/staging.py: cache entries are built beside themselves and renamed into place;
what a killed process left there is swept by the next one."""

from __future__ import annotations

import os
import stat
import time

from kvscribe import staging
from kvscribe.models import resolve
from kvscribe.models.store import _cached_path

DAY = staging.STALE_AFTER_SECONDS


def _age(path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _left_by_a_killed_process(target, suffix: str, seconds: float):
    """A staging folder with a part-written file in it, untouched for `seconds`."""
    folder = target.parent / f".{target.name}.{suffix}"
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"half")
    _age(folder, seconds)
    return folder


def test_a_new_staging_copy_sweeps_what_was_left_a_day_ago_and_nothing_else(tmp_path):
    target = tmp_path / "models" / "tiny.en-ggml-0123.bin"
    stale = _left_by_a_killed_process(target, "stale1", DAY + 60)
    stale_file = target.parent / f".{target.name}.stale2"
    stale_file.write_bytes(b"half")
    _age(stale_file, 2 * DAY)
    in_progress = _left_by_a_killed_process(target, "busy", DAY - 600)  # another writer's
    other_entry = target.parent / f".{target.name}x.old"  # another entry's (name shares a prefix)
    other_entry.write_bytes(b"theirs")
    _age(other_entry, 2 * DAY)
    target.write_bytes(b"whole")
    _age(target, 2 * DAY)

    made = staging.staging_file(target)

    assert not stale.exists() and not stale_file.exists()
    assert in_progress.exists() and other_entry.exists() and target.read_bytes() == b"whole"
    assert made.parent == target.parent and made.name.startswith(f".{target.name}.")
    assert made.stat().st_size == 0 and stat.S_IMODE(made.stat().st_mode) == 0o644
    folder = staging.staging_dir(target)
    assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert made.exists()  # made a moment ago: kept


def test_a_conversion_into_the_cache_sweeps_a_killed_conversions_copy(tmp_path, monkeypatch):
    """The transformers conversion of tiny.en (75 MB) after a run killed mid-conversion."""
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(tmp_path))
    ref = resolve("tiny.en", ("ctranslate2",))
    target = _cached_path(ref, "transformers-v1", "")
    stale = _left_by_a_killed_process(target, "k1ll3d", DAY + 1)
    converted = resolve("tiny.en", ("transformers",))
    assert converted.path == target and (target / "model.safetensors").is_file()
    assert not stale.exists()
    hidden = sorted(p.name for p in target.parent.iterdir() if p.name.startswith("."))
    assert hidden == [".digests", ".locks"]  # no staging copy: the memos and the entries' locks


# A process that needs a cache entry: it waits until all its siblings are ready to ask (so
# that they ask together), then makes the entry if it is missing. Its make takes 0.5 s,
# during which the others ask too.
_MAKER = """
import os, sys, time
from pathlib import Path
from kvscribe.staging import made_once

target, log, ready = (Path(argument) for argument in sys.argv[1:4])
siblings = int(sys.argv[4])
(ready / str(os.getpid())).touch()
deadline = time.monotonic() + 30
while len(list(ready.iterdir())) < siblings and time.monotonic() < deadline:
    time.sleep(0.01)

def make():
    with log.open("a") as lines:
        lines.write(f"{os.getpid()}\\n")
    time.sleep(0.5)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("made by " + str(os.getpid()))

made_once(target, target.is_file, make)
print(target.read_text())
"""


def test_processes_that_need_one_entry_at_once_make_it_once(tmp_path):
    """Three processes ask for the same missing entry together: one makes it, the others
    wait for it and find it made (each made its own before)."""
    import subprocess
    import sys

    target, log, ready = tmp_path / "models" / "entry", tmp_path / "makers.log", tmp_path / "ready"
    ready.mkdir()
    arguments = [str(target), str(log), str(ready), "3"]
    makers = [
        subprocess.Popen(
            [sys.executable, "-c", _MAKER, *arguments], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    said = [maker.communicate(timeout=60)[0] for maker in makers]
    assert [maker.returncode for maker in makers] == [0, 0, 0]
    made = log.read_text().split()
    assert len(made) == 1, made
    assert said == [f"made by {made[0]}\n"] * 3


def test_an_entry_the_cache_cannot_lock_is_still_made(tmp_path):
    """Where no lock file can be made (here the cache's folder is a file), nothing is held
    and the entry's maker runs as it did before there was a lock: its own error says why."""
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache's folder should be")
    target, made = blocker / "models" / "entry", []
    staging.made_once(target, lambda: False, lambda: made.append(target))
    assert made == [target]
