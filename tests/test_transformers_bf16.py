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


@pytest.fixture(scope="module")
def default_with_amx():
    """The backend of the default compute type loaded as on a CPU with AMX, once for the
    module (its compute type is settled at load)."""
    with pytest.MonkeyPatch.context() as patch:
        return _load(patch, True)


def test_the_default_follows_the_cpu_and_a_named_type_is_kept(monkeypatch, default_with_amx):
    import torch

    for backend, dtype in (
        (default_with_amx, torch.bfloat16),
        (_load(monkeypatch, False), torch.float32),
    ):
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


def test_bfloat16_decodes_with_float32_logits(monkeypatch, default_with_amx):
    import torch

    from kvscribe.backends.transformers.decoder import PolicyDecoder

    backend = default_with_amx
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
    # Greedy: the dtypes are the claim, not the beam (bfloat16 matmuls are slow without AMX).
    run = backend.transcribe(load_audio(SAMPLE), DecodeRequest(beam_size=1))
    text = "".join(segment.text for segment in run.segments)
    assert wer(SAMPLE_TEXT, text) <= 0.1, text
    assert set(network_out) == {torch.bfloat16}  # the network ran in bfloat16
    assert set(logits_out) == {torch.float32}  # the search read float32
    assert run.report.settings["compute type"] == "bfloat16"
