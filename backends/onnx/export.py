"""`kvscribe setup onnx`: Whisper as two ONNX graphs whose decoder KV cache is explicit graph
inputs and outputs, so kvscribe's cache policies can act between steps (the graphs:
backends/onnx/graphs.py; how they are traced: backends/onnx/trace.py).

The weights are the transformers backend's (`models.resolve(name, ("transformers",))`: the
embedded tiny.en is converted once from its CTranslate2 package), loaded into its own torch
modules. An export lives in the user cache dir under `onnx/`, in a folder named after the
model and keyed by EXPORT_VERSION and the digest of the weights and of the configs that
shape the graphs (a changed checkpoint or exporter is a new folder, never a stale one). It
is built in a temporary folder beside it and renamed into place, under a lock, so a
set-up that is interrupted leaves nothing half-written and two at once export once.
manifest.json says what is inside: each graph's file, size, sha256, inputs and outputs
(read back from the written files), the opset, the versions that made it and the model's
digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvscribe.errors import BackendUnavailableError, ModelNotFoundError, OutputError, UsageError
from kvscribe.paths import cache_dir
from kvscribe.staging import staging_dir

EXPORT_VERSION = 1
MANIFEST = "manifest.json"
COMPUTE_TYPES = ("float32", "int8")  # int8: float32 graphs plus int8 copies
ROLES = ("encoder", "decoder_step")
INSTALL_HINT = "pip install 'kvscribe[onnx]'"
SUBJECT = "kvscribe setup onnx"
_REQUIRED = ("torch", "safetensors", "onnx", "onnxruntime")
# Files that shape the graphs besides the weights (sizes; alignment heads).
_SHAPING_FILES = ("config.json", "generation_config.json")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class OnnxExport:
    path: Path
    manifest: dict

    def has(self, compute_type: str) -> bool:
        return compute_type in self.manifest["graphs"]

    def graph(self, role: str, compute_type: str = "float32") -> Path:
        """The file of graph `role` ("encoder" or "decoder_step") in `compute_type`."""
        return self.path / self.manifest["graphs"][compute_type][role]["file"]


def find(model: str | None = None, compute_type: str = "float32") -> OnnxExport | None:
    """The export of `model` holding `compute_type`, when one is complete in the cache."""
    _check_compute_type(compute_type)
    found = read(export_dir(_resolve(model)))
    return found if found is not None and found.has(compute_type) else None


def export(
    model: str | None = None,
    compute_type: str = "float32",
    force: bool = False,
    progress: Progress = lambda what: None,
) -> OnnxExport:
    """Export `model` (None: the embedded default), reusing what the cache holds unless
    `force`; int8 also writes int8 copies of both graphs."""
    from filelock import FileLock

    _check_compute_type(compute_type)
    require()
    ref = _resolve(model)
    target = export_dir(ref)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.lock"):  # another set-up may have finished while this one waited
        existing = read(target)
        present = None if force else existing
        if present is not None and present.has(compute_type):
            return present
        if force and existing is not None and existing.has("int8"):
            compute_type = "int8"  # its int8 copies come from the graphs redone: redo them too
        staging = staging_dir(target)
        try:
            manifest = _build(ref, staging, compute_type, present, progress)
            _publish(staging, target)
        except OSError as exc:
            raise OutputError(
                f"cannot write the export: {exc.strerror or exc}",
                subject=str(target),
                hint="free some disk space or fix the cache dir's permissions",
            ) from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return OnnxExport(target, manifest)


def require() -> None:
    """BackendUnavailableError naming the extra when an exporting module is missing."""
    for module in _REQUIRED:
        try:
            __import__(module)
        except ImportError:
            raise BackendUnavailableError(
                f"{module} is not installed, needed to export ONNX graphs",
                subject=SUBJECT,
                hint=INSTALL_HINT,
            ) from None


def export_dir(ref) -> Path:
    """Where the export of the transformers checkpoint `ref` lives (or will)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", ref.name).strip("_.") or "model"
    return cache_dir() / "onnx" / f"{safe}-onnx-v{EXPORT_VERSION}-{model_digest(ref)[:16]}"


def model_digest(ref) -> str:
    """sha256 over the weights' sha256 (remembered by the model store, so hashed once) and
    the config files that shape the graphs."""
    from kvscribe.models.store import file_digest

    digest = hashlib.sha256(file_digest(ref.path / "model.safetensors").encode())
    for name in _SHAPING_FILES:
        if (ref.path / name).is_file():
            digest.update((ref.path / name).read_bytes())
    return digest.hexdigest()


def _check_compute_type(compute_type: str) -> None:
    if compute_type not in COMPUTE_TYPES:
        raise UsageError(
            f"unknown compute type {compute_type!r}",
            subject="--compute-type",
            hint=f"use one of: {', '.join(COMPUTE_TYPES)}",
        )


def _resolve(model: str | None):
    from kvscribe import models

    return models.resolve(model, ("transformers",))


def read(target: Path) -> OnnxExport | None:
    """The export in `target` if its manifest is of this EXPORT_VERSION and every graph it
    lists is there at its size (a folder from another version is exported again)."""
    try:
        manifest = json.loads((target / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    try:
        if manifest["export_version"] != EXPORT_VERSION:
            return None
        for graphs in manifest["graphs"].values():
            for entry in graphs.values():
                path = target / entry["file"]
                if not path.is_file() or path.stat().st_size != entry["bytes"]:
                    return None
    except (KeyError, TypeError, AttributeError):  # a manifest of another shape
        return None
    return OnnxExport(target, manifest)


def _build(ref, staging: Path, compute_type: str, present, progress: Progress) -> dict:
    """Write the graphs `compute_type` needs into `staging` (float32 ones `present` already
    holds are linked, not traced again), check that onnxruntime loads each, and write the
    manifest."""
    from kvscribe.backends.onnx import manifest, trace

    files = {"float32": {role: f"{role}.onnx" for role in ROLES}}
    if compute_type == "int8":
        files["int8"] = {role: f"{role}.int8.onnx" for role in ROLES}
    if present is not None and present.has("float32"):
        for role in ROLES:
            _link(present.graph(role), staging / files["float32"][role])
        network = _network(ref)  # for the manifest's dimensions only
    else:
        network = _network(ref)
        progress(f"tracing the encoder of {ref.name} (ONNX opset {trace.OPSET})")
        encoder = staging / files["float32"]["encoder"]
        _step(ref, "exporting the encoder", trace.export_encoder, network, encoder)
        progress(f"tracing one decoder step of {ref.name}")
        step = staging / files["float32"]["decoder_step"]
        _step(ref, "exporting the decoder step", trace.export_decoder_step, network, step)
    for role, name in files.get("int8", {}).items():
        progress(f"quantizing the {role.replace('_', ' ')} to int8")
        source = staging / files["float32"][role]
        _step(ref, f"quantizing {source.name}", trace.quantize, role, source, staging / name)
    progress("checking that onnxruntime loads every graph")
    graphs = {
        kind: {
            role: _step(ref, f"loading {name}", manifest.graph_entry, staging, name)
            for role, name in roles.items()
        }
        for kind, roles in files.items()
    }
    model = {"name": ref.name, "origin": ref.origin, "digest": model_digest(ref)}
    made = {"export_version": EXPORT_VERSION} | manifest.describe(model, network, graphs)
    (staging / MANIFEST).write_text(json.dumps(made, indent=2) + "\n", encoding="utf-8")
    return made


def _network(ref):
    import torch
    from safetensors import SafetensorError

    from kvscribe.backends.transformers import network

    try:
        return network.load(ref.path, torch.float32, "cpu")
    except (OSError, ValueError, KeyError, SafetensorError) as error:
        raise ModelNotFoundError(
            f"not a loadable Whisper checkpoint: {error}",
            subject=str(ref.path),
            hint="give --model a Whisper model kvscribe can read (`kvscribe models`)",
        ) from error


def _step(ref, what: str, run: Callable, *args):
    """`run(*args)`, its failure one line (torch, onnx and onnxruntime raise RuntimeError,
    ValueError or TypeError with pages of detail); --debug shows the traceback."""
    try:
        return run(*args)
    except (RuntimeError, ValueError, TypeError) as error:
        text = str(error).strip()
        raise BackendUnavailableError(
            f"{what} failed: {text.splitlines()[0] if text else type(error).__name__}",
            subject=ref.name,
            hint="rerun with --debug for the traceback, and report it",
        ) from error


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _publish(staging: Path, target: Path) -> None:
    """Rename `staging` into place; an older export there is moved aside first and removed
    (a directory cannot be renamed over a non-empty one)."""
    old = None
    if target.exists():
        old = staging_dir(target)
        os.replace(target, old / "export")
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
