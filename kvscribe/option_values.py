"""Option values as the command line spells them, parsed and checked: each a one-line
UsageError naming the flag (kvscribe.options holds what a run was asked)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path

from kvscribe.contract import TASKS
from kvscribe.errors import UsageError
from kvscribe.kvcache.spec import parse_cross, validate_policy
from kvscribe.writers import FORMATS


def parse_clips(text: str) -> tuple[tuple[float, float | None], ...]:
    bad = UsageError(
        "must be start,end pairs in seconds, in order (the last end may be left off)",
        subject="--clip-timestamps",
        hint=f"got {text!r}; e.g. 0,30 or 10,20,45",
    )
    try:
        times = [float(part) for part in text.split(",")]
    except ValueError:
        raise bad from None
    if any(t < 0 for t in times) or any(b <= a for a, b in itertools.pairwise(times)):
        raise bad
    ends: list[float | None] = [*times[1::2], *([None] if len(times) % 2 else [])]
    return tuple(zip(times[::2], ends, strict=True))


def parse_formats(values: Sequence[str] | None, to_dir: bool) -> tuple[str, ...]:
    """Each -f's `txt,srt` / `all` -> one tuple of formats (`-f srt -f json` is both). With
    a folder and no -f, write every format."""
    if not values:
        return FORMATS if to_dir else ()
    names: list[str] = []
    for part in ",".join(values).split(","):
        name = part.strip().lower()
        if name == "all":
            names.extend(FORMATS)
        elif name in FORMATS:
            names.append(name)
        else:
            raise UsageError(
                f"unknown format {name!r}",
                subject="--output-format",
                hint=f"use {', '.join(FORMATS)} or all (comma-separated)",
            )
    return tuple(dict.fromkeys(names))


def check_output_dir(folder: Path | None) -> None:
    """-o names a folder: one not there yet whose name ends like an output file
    (`-o talk.txt`) would become a folder of that name holding talk.txt/<stem>.txt."""
    if folder is not None and str(folder) == "-":
        raise UsageError(
            "-o - would make a folder named '-'",
            subject="--output-dir",
            hint="leave -o out: without it the transcript (or one -f format) goes to stdout",
        )
    if folder is None or folder.exists() or folder.suffix[1:].lower() not in FORMATS:
        return
    raise UsageError(
        f"{str(folder)!r} names a file, but -o is the folder outputs go into",
        subject="--output-dir",
        hint=f"name a folder, or write one file with `-f {folder.suffix[1:].lower()} > {folder}`",
    )


def check_writable(path: Path | None, option: str, folder: bool = False) -> None:
    """`option`'s path (a file, or with `folder` a folder) can be made there: no file where
    a folder must be, no folder where the file goes, and the nearest folder that exists is
    one this process may write in. Checked before a model loads, so a run does not end on
    it; what only the write finds (a read-only system folder) is said then."""
    if path is None:
        return
    if not folder and path.is_dir():
        raise UsageError(f"{path} is a folder", subject=option, hint="name a file to write")
    nearest = path if folder else path.parent
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise UsageError(
            f"cannot write under {nearest}: it is a file, not a folder",
            subject=option,
            hint="choose another path",
        )
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write in {nearest}",
            subject=option,
            hint="choose a folder you can write in, or fix its permissions",
        )


MAX_BATCH = 64
# The counts a command line's flag or a profile's backend section may set: (lowest, highest).
RANGES = {
    "beam_size": (1, 16),
    "batch_size": (1, MAX_BATCH),
    "threads": (1, 256),
    "cpu_threads": (1, 256),  # CTranslate2's name for threads in its profile section
}


def out_of_range(name: str, value: int | None) -> str | None:
    """ "must be between A and B" where `value` is outside `name`'s range, else None."""
    low, high = RANGES[name]
    if value is None or low <= value <= high:
        return None
    return f"must be between {low} and {high}"


def check_count(name: str, value: int | None) -> None:
    """The flag of `name` (--beam-size, --batch-size, --threads) within its range."""
    problem = out_of_range(name, value)
    if problem is not None:
        flag = "--" + name.replace("_", "-")
        raise UsageError(problem, subject=flag, hint=f"got {value}")


def check_decoding(task: str, beam_size: int | None) -> None:
    if task not in TASKS:
        raise UsageError(
            f"must be one of {', '.join(TASKS)}", subject="--task", hint=f"got {task!r}"
        )
    check_count("beam_size", beam_size)


def check_kv(kv_policy: str | None, kv_cross: str | None) -> None:
    if kv_policy is not None:
        validate_policy(kv_policy)
    if kv_cross is not None:
        parse_cross(kv_cross)


def check_threads(threads: int | None) -> None:
    check_count("threads", threads)
