"""The transformers backend's own torch Whisper (backends/transformers/network.py) against
transformers' WhisperForConditionalGeneration loaded from the same files: the same
weights, the same encoder output and the same decoder logits to the bit; a broken
checkpoint is a one-line error; and a transformers run never imports transformers."""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kvscribe import models  # noqa: E402
from kvscribe.audio import load_audio  # noqa: E402
from kvscribe.audio.mel import log_mel  # noqa: E402
from kvscribe.errors import ExitCode  # noqa: E402
from tests.conftest import CARDS, SAMPLE, run_cli  # noqa: E402

pytestmark = [pytest.mark.transformers]


@pytest.fixture(scope="module")
def both():
    from transformers import WhisperForConditionalGeneration

    from kvscribe.backends.transformers import network

    path = models.resolve("tiny.en", ("transformers",)).path
    ours = network.load(path, torch.float32, "cpu")
    theirs = WhisperForConditionalGeneration.from_pretrained(str(path), dtype=torch.float32)
    return ours, theirs.eval()


def test_weights_and_sizes_are_transformers_own(both):
    ours, theirs = both
    mine, reference = ours.state_dict(), theirs.state_dict()
    assert set(mine) == set(reference)
    assert all(torch.equal(mine[name], reference[name]) for name in mine)
    assert ours.proj_out.weight is ours.model.decoder.embed_tokens.weight  # tied, one copy
    for field in ("d_model", "decoder_layers", "num_mel_bins", "vocab_size"):
        assert getattr(ours.config, field) == getattr(theirs.config, field)
    assert [list(pair) for pair in ours.alignment_heads] == list(
        theirs.generation_config.alignment_heads
    )


def test_encoder_and_decoder_logits_equal_transformers_to_the_bit(both):
    from kvscribe.backends.transformers.decoder import PolicyDecoder
    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.kvcache.spec import parse_cross, parse_policy

    ours, theirs = both
    features = log_mel(torch.from_numpy(load_audio(SAMPLE)), 80)[None, :, :3000]
    ids = torch.tensor([[50257, 50362, 843, 523, 616, 5891, 3399, 1265]])
    logits = []
    with torch.inference_mode():
        encoded = ours.model.encoder(features)
        assert torch.equal(encoded, theirs.model.encoder(features).last_hidden_state)
        for network in (ours, theirs):
            cross = CrossAttentionStore(parse_cross("shared"), 1)
            cross.fill(encoded, network.model.decoder)
            cache = PolicyCache(parse_policy("full", 4))
            logits.append(PolicyDecoder(network).logits(ids, cache, cross, positions=(-1,)))
    assert torch.equal(*logits)


@pytest.mark.slow
def test_a_checkpoint_missing_a_weight_is_a_one_line_error(tmp_path):
    from safetensors.torch import load_file, save_file

    source = models.resolve("tiny.en", ("transformers",)).path
    broken = tmp_path / "broken-tiny"
    shutil.copytree(source, broken)
    weights = load_file(str(broken / "model.safetensors"))
    del weights["model.encoder.layer_norm.bias"]
    save_file(weights, str(broken / "model.safetensors"))
    result = run_cli(SAMPLE, "--backend", "transformers", "--model", broken, "-q")
    assert result.code == ExitCode.MODEL_NOT_FOUND, result.stderr
    assert "model.encoder.layer_norm.bias" in result.stderr and str(broken) in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_transformers_run_imports_no_transformers(monkeypatch):
    """Importing transformers' Whisper costs a run 1.5 s: the backend must not."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # every import, to stderr
    result = run_cli(CARDS, "--backend", "transformers", "-q")  # the imports: the claim
    assert result.code == 0, result.stderr
    modules = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "kvscribe.backends.transformers.network" in modules  # the run did load the backend
    assert not [name for name in modules if name.split(".")[0] == "transformers"]
