"""Backends loaded once per test run and shared by every test that only reads them.

Loading the transformers backend (weights, policy decoder) costs seconds; a test run
used to load the same configuration in many modules. A backend is keyed by what shapes
it (backend, profile, model, profile fields changed) and kept for the whole run: tests
transcribe with it, as a batch run transcribes many files with one backend, and must not
change it. A test that changes a backend's state loads its own.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import threading


def backend(name: str, profile_name: str = "cpu-laptop", model: str | None = None, **changes):
    """The backend `name` on the CPU with `profile_name` (fields in `changes` replaced),
    loaded on first use and shared from then on, however the arguments are spelled
    (`("transformers",)` and `("transformers", "cpu-laptop")` are one backend)."""
    return _shared(name, profile_name, model, tuple(sorted(changes.items())))


@functools.cache
def _shared(name: str, profile_name: str, model: str | None, changes: tuple):
    return fresh(name, profile_name, model, **dict(changes))


def fresh(name: str, profile_name: str = "cpu-laptop", model: str | None = None, **changes):
    """A backend of the test's own (for changes that are not hashable, or state it alters)."""
    from kvscribe import models, profile, registry

    backend_cls = registry.get(name)
    chosen = dataclasses.replace(profile.load(profile_name), device="cpu", **changes)
    if name == "transformers" and "compute_type" not in chosen.settings_for(name):
        # The cache figures these tests check are float32's on every machine; the default,
        # bfloat16 on CPUs with AMX, has its own tests (tests/test_transformers_bf16.py).
        section = {**chosen.settings_for(name), "compute_type": "float32"}
        chosen = dataclasses.replace(chosen, backends={**chosen.backends, name: section})
    resolved = models.resolve(model, backend_cls.capabilities.model_formats)
    loaded = backend_cls(resolved, chosen, "cpu")
    loaded.load()
    if name == "transformers":
        _remember_encodings(loaded.network.model.encoder, resolved.path)
    return loaded


def ctranslate2_on_threads(threads: int, model: str | None = None, **settings):
    """The CTranslate2 backend of the test's own on `threads` threads, as on a machine of that
    many cores (the suite's workers get one thread each, and one thread has no replicas),
    with other `[ctranslate2]` `settings` of the CPU profile's replaced."""
    from kvscribe import profile

    chosen = profile.load("cpu-laptop")
    section = {**chosen.settings_for("ctranslate2"), "cpu_threads": threads, **settings}
    return fresh("ctranslate2", model=model, backends={**chosen.backends, "ctranslate2": section})


# Encoder outputs, by engine and input window, kept for the test run (bytes are capped).
_ENCODED: collections.OrderedDict[tuple, tuple[object, int]] = collections.OrderedDict()
_ENCODED_CAP = 256 * 2**20
_ENCODED_LOCK = threading.Lock()


def remember_encodings(backend) -> None:
    """A backend of a test's own (a batch worker's, say) given the suite's encoder memory
    (`_remember`): the transformers or the ctranslate2 one."""
    if hasattr(backend, "network"):  # transformers
        _remember_encodings(backend.network.model.encoder, backend.model.path)
    else:
        remember_ct2_encodings(backend)


def _remember_encodings(encoder, model_path) -> None:
    """The transformers encoder (see `_remember`)."""
    import torch

    def key(features) -> tuple:
        mode = torch.is_inference_mode_enabled()  # an inference tensor only where it was one
        values = features.detach().float().cpu().numpy()  # numpy has no bfloat16
        return ("transformers", str(model_path), mode, str(features.dtype), values)

    _remember(encoder, "forward", key, lambda out: out.untyped_storage().nbytes())


def remember_ct2_encodings(backend) -> None:
    """The ctranslate2 backend's encoder (faster-whisper's `WhisperModel.encode`, which its
    sequential, batched and streamed paths all call; see `_remember`)."""
    import numpy as np

    engine = backend.engine

    def key(features) -> tuple:
        return ("ctranslate2", str(backend.model.path), engine.model.compute_type, features)

    _remember(engine, "encode", key, lambda out: np.asarray(out).nbytes)


def _remember(owner, method: str, key_of, size_of) -> None:
    """Whisper's encoder is a pure function of its input, and every profile, policy and test
    encodes the same eval windows again (a third of the transformers tests' time): an input
    seen before gets the output the real encoder gave it then, the same tensor bit for bit.
    The decoder, the caches and everything after the encoder run every time."""
    real = getattr(owner, method)

    def remembered(features, *args, **kwargs):
        if args or kwargs:
            return real(features, *args, **kwargs)
        *engine, array = key_of(features)
        if not hasattr(array, "tobytes"):  # not an array in memory: nothing to key it by
            return real(features)
        digest = hashlib.blake2b(array.tobytes(), digest_size=16).digest()
        key = (*engine, array.shape, str(array.dtype), digest)
        with _ENCODED_LOCK:  # the batched path encodes from a thread per replica
            if key in _ENCODED:
                _ENCODED.move_to_end(key)
                return _ENCODED[key][0]
        out = real(features)
        with _ENCODED_LOCK:
            _ENCODED[key] = (out, size_of(out))
            while sum(size for _, size in _ENCODED.values()) > _ENCODED_CAP:
                _ENCODED.popitem(last=False)
        return out

    setattr(owner, method, remembered)
