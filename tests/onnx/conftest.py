"""One export of the embedded tiny.en per test run (`kvscribe setup onnx`: float32 and int8,
for real, into the run's own cache), its onnxruntime sessions, and the transformers
backend they are held to. The test modules skip themselves without the onnx extra."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvscribe.audio import load_audio
from tests import loaded
from tests.conftest import SAMPLE, run_cli, run_folder

# What the modules here need, skipped together (in each module) when one is missing.
NEEDS = {"onnx": "the onnx extra is not installed: pip install 'kvscribe[onnx]'"}
NEEDS |= {"torch": "torch is not installed", "onnxruntime": "onnxruntime is not installed"}


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> Path:
    """One for the whole run, its xdist workers' too: each worker exported again (10-12 CPU
    s each)."""
    folder = run_folder(tmp_path_factory) / "onnx-cache"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def exported(cache):
    """`kvscribe setup onnx` (its default: float32 graphs and int8 copies) run for real into
    the run's own cache: by the first worker to get there, the others waiting on its lock
    and then finding the export (as a user's second `setup onnx` does)."""
    import fcntl

    from kvscribe.backends.onnx.export import OnnxExport

    with (cache.parent / "onnx-cache.lock").open("w") as lock, pytest.MonkeyPatch.context() as env:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env.setenv("KVSCRIBE_CACHE_DIR", str(cache))
        result = run_cli("setup", "onnx")
    assert result.code == 0, result.stderr
    path = Path(result.stdout.strip())
    return OnnxExport(path, json.loads((path / "manifest.json").read_text()))


def onnx_backend(exported, profile_name: str, compute_type: str = "float32"):
    """The onnx backend on `exported`, under a built-in profile with its [onnx] compute
    type replaced (float32 by default: what parity with the float32 torch decoder needs)."""
    import dataclasses

    from kvscribe import models, profile, registry

    chosen = profile.load(profile_name)
    section = {**chosen.settings_for("onnx"), "compute_type": compute_type}
    chosen = dataclasses.replace(chosen, backends={**chosen.backends, "onnx": section})
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KVSCRIBE_CACHE_DIR", str(exported.path.parent.parent))
        backend_cls = registry.get("onnx")
        model = models.resolve(None, backend_cls.capabilities.model_formats)
        backend = backend_cls(model, chosen, "cpu")
        backend.load()
    return backend


@pytest.fixture(scope="session")
def sessions(exported):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS") or 1)

    def session(role: str, kind: str):
        path = str(exported.graph(role, kind))
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    return {
        kind: (session("encoder", kind), session("decoder_step", kind))
        for kind in exported.manifest["graphs"]
    }


@pytest.fixture(scope="session")
def reference():
    """The transformers backend (profile cpu-laptop: full self-attention cache, one shared
    cross copy, float32) and its plan for a greedy decode without timestamps."""
    backend = loaded.backend("transformers")
    plan = backend._plan("en", "transcribe", 1, timestamps=False)
    return backend, plan


@pytest.fixture(scope="session")
def window():
    """The log-mel of JFK's first (and only) 30 s window [1, 80, 3000]."""
    import torch

    from kvscribe.audio.mel import log_mel

    return log_mel(torch.from_numpy(load_audio(SAMPLE)), 80)[None, :, :3000]
