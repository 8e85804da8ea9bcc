"""The transformers backend's compute type: bfloat16 by default on CPUs that multiply
bfloat16 matrices in hardware (Intel AMX), float32 on the others, float32 logits always."""

from __future__ import annotations

import dataclasses

import pytest

from kvscribe.audio import load_audio
from kvscribe.contract import DecodeRequest
from kvscribe.errors import UsageError
from kvscribe.machine import hardware
from tests.conftest import SAMPLE, SAMPLE_TEXT, wer

pytestmark = [pytest.mark.transformers]


def _load(monkeypatch, amx: bool, compute_type: str | None = None):
    from kvscribe import models, profile, registry

    monkeypatch.setattr(hardware, "cpu_multiplies_bfloat16", lambda: amx)
    chosen = profile.load("cpu-laptop")
    if compute_type is not None:
        section = {**chosen.settings_for("transformers"), "compute_type": compute_type}
        chosen = dataclasses.replace(chosen, backends={**chosen.backends, "transformers": section})
    backend_cls = registry.get("transformers")
    model = models.resolve(None, backend_cls.capabilities.model_formats)
    backend = backend_cls(model, dataclasses.replace(chosen, device="cpu"), "cpu")
    backend.load()
    return backend


def test_the_default_follows_the_cpu_and_a_named_type_is_kept(monkeypatch):
    import torch

    for amx, dtype in ((True, torch.bfloat16), (False, torch.float32)):
        backend = _load(monkeypatch, amx)
        assert backend.dtype == dtype
        assert backend.network.proj_out.weight.dtype == dtype
        assert backend.describe_settings()["compute type"] == str(dtype).removeprefix("torch.")
    assert _load(monkeypatch, True, "float32").dtype == torch.float32
    assert _load(monkeypatch, False, "bfloat16").dtype == torch.bfloat16


def test_a_compute_type_it_does_not_know_is_a_one_line_usage_error(monkeypatch):
    with pytest.raises(UsageError) as caught:
        _load(monkeypatch, True, "float8")
    assert "float32, float16, bfloat16" in caught.value.hint
    assert caught.value.subject.endswith("[transformers]")  # the profile's, not a flag


def test_bfloat16_decodes_with_float32_logits(monkeypatch):
    import torch

    from kvscribe.backends.transformers.decoder import PolicyDecoder

    backend = _load(monkeypatch, True)
    network_out, logits_out = [], []
    real_projection, real_logits = backend.network.proj_out.forward, PolicyDecoder.logits

    def projected(hidden):
        network_out.append(real_projection(hidden).dtype)
        return real_projection(hidden)

    def logits(self, *args, **kwargs):
        out = real_logits(self, *args, **kwargs)
        logits_out.append(out.dtype)
        return out

    monkeypatch.setattr(backend.network.proj_out, "forward", projected)
    monkeypatch.setattr(PolicyDecoder, "logits", logits)
    run = backend.transcribe(load_audio(SAMPLE), DecodeRequest())
    text = "".join(segment.text for segment in run.segments)
    assert wer(SAMPLE_TEXT, text) <= 0.1, text
    assert set(network_out) == {torch.bfloat16}  # the network ran in bfloat16
    assert set(logits_out) == {torch.float32}  # the search read float32
    assert run.report.settings["compute type"] == "bfloat16"
