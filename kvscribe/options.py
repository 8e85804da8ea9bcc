"""Everything one `kvscribe` run was asked to do, validated once, then frozen."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvscribe.errors import UsageError
from kvscribe.kvcache.spec import parse_cross, validate_policy
from kvscribe.writers import FORMATS

TASKS = ("transcribe", "translate")
DEVICES = ("auto", "cpu", "cuda", "mps")


@dataclass(frozen=True)
class TranscribeOptions:
    inputs: tuple[Path, ...]
    backend: str = "ctranslate2"
    profile: str = "auto"
    model: str | None = None
    language: str | None = None
    task: str = "transcribe"
    formats: tuple[str, ...] = ()  # empty: the timestamped transcript on stdout
    output_dir: Path | None = None
    beam_size: int | None = None
    device: str | None = None
    stats_json: Path | None = None
    quiet: bool = False
    kv_policy: str | None = None  # overrides the profile's self-attention policy
    kv_cross: str | None = None  # overrides the profile's cross-attention policy
    # Finding inputs in folders.
    recursive: bool = False
    globs: tuple[str, ...] = ()
    # Batch runs into --output-dir (resumable through the folder's manifest).
    jobs: int = 1
    force: bool = False
    fail_fast: bool = False
    json_events: bool = False

    def __post_init__(self) -> None:
        if not self.inputs:
            raise UsageError(
                "no input files given",
                subject="FILE",
                hint="pass one or more audio files or folders",
            )
        if self.task not in TASKS:
            raise UsageError(
                f"must be one of {', '.join(TASKS)}", subject="--task", hint=f"got {self.task!r}"
            )
        if self.beam_size is not None and not 1 <= self.beam_size <= 16:
            raise UsageError(
                "must be between 1 and 16", subject="--beam-size", hint=f"got {self.beam_size}"
            )
        if self.device is not None and self.device not in DEVICES:
            raise UsageError(
                f"must be one of {', '.join(DEVICES)}",
                subject="--device",
                hint=f"got {self.device!r}",
            )
        if self.kv_policy is not None:
            validate_policy(self.kv_policy)
        if self.kv_cross is not None:
            parse_cross(self.kv_cross)
        if self.jobs < 1:
            raise UsageError("must be at least 1", subject="--jobs", hint=f"got {self.jobs}")
        batch_only = {
            "--jobs": self.jobs > 1,
            "--json": self.json_events,
            "--force": self.force,
            "--fail-fast": self.fail_fast,
        }
        for flag, used in batch_only.items():
            if used and self.output_dir is None:
                raise UsageError(
                    "only applies to runs that write into a folder",
                    subject=flag,
                    hint="add --output-dir DIR",
                )
        if self.output_dir is None and len(self.formats) > 1:
            raise UsageError(
                "several formats need a folder to write them to",
                subject="--output-format",
                hint="add --output-dir DIR",
            )


def parse_formats(value: str | None, to_dir: bool) -> tuple[str, ...]:
    """`txt,srt` / `all` -> a tuple of formats. With a folder and no -f, write every format."""
    if value is None:
        return FORMATS if to_dir else ()
    names: list[str] = []
    for part in value.split(","):
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
