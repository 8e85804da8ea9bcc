"""`kvscribe setup onnx` (backends/onnx): the embedded tiny.en exported for real into a
temporary cache, then run with onnxruntime (CPU) and numpy alone, the K/V cache kept in
numpy lists the test grows and trims itself, against the transformers backend's torch
modules (backends/transformers): the same cross-attention K/V, the same greedy tokens and per-step
logits, the same logits under a sliding window with positions counting on, beams folded into
the queries of one cross-attention copy per chunk, and an int8 export that still transcribes.

The greedy comparison decodes without timestamps (<|notimestamps|> in the prompt, the
batched chunks' way): the suppression masks are the backend's own (TokenRules), and without
timestamp rules a greedy step is an argmax of the masked logits, which numpy does alone.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.audio.mel import log_mel
from kvscribe.errors import BackendUnavailableError
from tests.conftest import SAMPLE, SAMPLE_TEXT, run_cli, wer
from tests.onnx.conftest import NEEDS

for module, why in NEEDS.items():
    pytest.importorskip(module, reason=why)

import torch  # noqa: E402

from tests.onnx import decoders  # noqa: E402

pytestmark = [pytest.mark.onnx, pytest.mark.model, pytest.mark.slow]

# float32 graphs against float32 torch: the same weights, other kernels (measured on tiny.en:
# at most 3.7e-5 apart over the greedy decode, 5.1e-5 under the window; logits span ~30).
LOGIT_TOLERANCE = 1e-3


def test_setup_writes_both_graphs_and_a_manifest_then_reuses_them(exported, cache, monkeypatch):
    manifest = exported.manifest
    assert manifest["opset"] == 17 and manifest["export_version"] == 1
    assert len(manifest["model"]["digest"]) == 64 and manifest["versions"]["onnx"]
    assert set(manifest["graphs"]) == {"float32", "int8"}
    step = manifest["graphs"]["float32"]["decoder_step"]
    shapes = {entry["name"]: entry["shape"] for entry in step["inputs"] + step["outputs"]}
    assert shapes["tokens"] == shapes["positions"] == ["rows", "new"]
    assert shapes["past_key_0"] == ["rows", 6, "kept_0", 64]
    assert shapes["cross_value_3"] == ["chunks", 6, 1500, 64]
    assert shapes["logits"] == ["rows", "new", 51864]
    assert shapes["key_3"] == ["rows", 6, "new", 64]
    assert shapes["alignment_scores"] == ["rows", len(manifest["alignment_heads"]), "new", 1500]
    encoder = manifest["graphs"]["float32"]["encoder"]
    assert encoder["inputs"][0]["shape"] == ["batch", 80, 3000]
    before = {p.name: p.stat().st_mtime_ns for p in exported.path.iterdir()}

    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(cache))
    again = run_cli("setup", "onnx", "--compute-type", "float32")  # float32 is there too
    assert again.code == 0, again.stderr
    assert "nothing to do" in again.stderr and again.stdout.strip() == str(exported.path)
    assert {p.name: p.stat().st_mtime_ns for p in exported.path.iterdir()} == before


def test_a_forced_float32_export_makes_the_int8_copies_again_not_drops_them(
    exported, tmp_path, monkeypatch
):
    """`setup onnx --compute-type float32 --force` left only the float32 graphs, and every
    built-in onnx profile (int8) then failed with exit 5. What it builds is checked here;
    building is traced for real by the `exported` fixture."""
    import shutil

    from kvscribe.backends.onnx import export

    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(tmp_path))
    target = export.export_dir(export._resolve(None))
    target.parent.mkdir(parents=True)
    shutil.copytree(exported.path, target)
    asked: list[str] = []

    def build(ref, staging, compute_type, present, progress):
        asked.append(compute_type)
        raise OSError(28, "stopped here by the test")

    monkeypatch.setattr(export, "_build", build)
    with pytest.raises(Exception, match="stopped here by the test"):
        export.export(compute_type="float32", force=True)
    assert asked == ["int8"]  # the float32 graphs and, from them, the int8 copies
    assert export.read(target).has("int8")  # a failed export leaves the one there whole


def test_encoder_cross_kv_equal_the_torch_modules(sessions, reference, window):
    from kvscribe.kvcache.cache import CrossAttentionStore
    from kvscribe.kvcache.spec import parse_cross

    backend, _ = reference
    encoder, _ = sessions["float32"]
    ours = encoder.run(None, {"features": window.numpy()})
    store = CrossAttentionStore(parse_cross("shared"), 1)
    with torch.inference_mode():
        store.fill(backend.network.model.encoder(window), backend.network.model.decoder)
    theirs = [part.numpy() for i in range(len(ours) // 2) for part in store.get(i)]
    assert [a.shape for a in ours] == [b.shape for b in theirs] == [(1, 6, 1500, 64)] * 8
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))
    assert worst < 5e-4, worst


@pytest.fixture(scope="module")
def torch_tokens(reference, window) -> list[int]:
    """The transformers backend's greedy tokens on JFK's window, decoded once for the tests
    that hold the graphs to them (the same backend, plan and window each time)."""
    backend, plan = reference
    return decoders.torch_greedy(backend, plan, window)


@pytest.fixture(scope="module")
def torch_full_logits(reference, window, torch_tokens) -> list[np.ndarray]:
    """Each step's logits from the backend's decoder with its full cache, fed those tokens."""
    backend, plan = reference
    return decoders.torch_logits(backend, window, plan.prompt_for([]), torch_tokens, "full")


def test_greedy_tokens_and_every_steps_logits_equal_the_transformers_backend(
    sessions, reference, window, torch_tokens, torch_full_logits
):
    _, plan = reference
    prompt = plan.prompt_for([])
    tokens, logits = decoders.onnx_decode(sessions["float32"], window.numpy(), plan, prompt)
    assert tokens == torch_tokens and len(tokens) > 20
    theirs = torch_full_logits  # fed torch's tokens, which are ours (asserted above)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(logits, theirs, strict=True))
    assert worst < LOGIT_TOLERANCE, worst


def test_a_sliding_window_cache_with_counting_positions_equals_torchs(
    sessions, reference, window, torch_tokens, torch_full_logits
):
    backend, plan = reference
    prompt = plan.prompt_for([])
    tokens, full = torch_tokens, torch_full_logits
    theirs = decoders.torch_logits(backend, window, prompt, tokens, "window=4")
    _, ours = decoders.onnx_decode(
        sessions["float32"], window.numpy(), plan, prompt, tokens, keep=4
    )
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))
    assert worst < LOGIT_TOLERANCE, worst
    assert max(float(np.abs(a - b).max()) for a, b in zip(ours, full, strict=True)) > 0.1
    # Positions that restart at the kept count (what a trimmed cache's length would say)
    # are another model input: the logits move.
    _, wrong = decoders.onnx_decode(
        sessions["float32"], window.numpy(), plan, prompt, tokens, keep=4, count_kept=True
    )
    assert max(float(np.abs(a - b).max()) for a, b in zip(wrong, theirs, strict=True)) > 0.1


def test_beams_folded_into_one_cross_copy_per_chunk_equal_a_copy_per_row(sessions):
    encoder, step = sessions["float32"]
    audio = load_audio(SAMPLE)
    mels = [log_mel(torch.from_numpy(audio[s:]), 80)[:, :3000] for s in (0, 4 * SAMPLE_RATE)]
    cross = encoder.run(None, {"features": torch.stack(mels).numpy()})  # 2 chunks
    chunks, beams, layers = 2, 5, len(cross) // 2
    rng = np.random.default_rng(0)
    rows = chunks * beams
    past = [np.zeros((rows, 6, 0, 64), np.float32) for _ in range(2 * layers)]
    for new in (5, 1):  # a prompt of 5 tokens per row, then one step
        tokens = rng.integers(0, 50256, size=(rows, new))
        seen = past[0].shape[2]
        positions = np.tile(np.arange(seen, seen + new), (rows, 1))
        folded = step.run(None, decoders.feed(step, tokens, positions, past, cross))
        copies = [np.repeat(part, beams, axis=0) for part in cross]
        per_row = step.run(None, decoders.feed(step, tokens, positions, past, copies))
        # Logits, new K/V, alignment scores: the same up to float32 rounding (one matrix
        # product of beams * new query rows instead of `beams` of `new`; measured on tiny.en:
        # equal to the bit for the 5-token prompt, at most 5.3e-5 apart for the next step).
        for a, b in zip(folded, per_row, strict=True):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
        assert np.array_equal(folded[0].argmax(-1), per_row[0].argmax(-1))
        past = [np.concatenate([p, n], axis=2) for p, n in zip(past, folded[1:-1], strict=True)]
    assert folded[0].shape == (rows, 1, 51864)


def test_the_int8_export_transcribes_jfk(sessions, reference, window):
    backend, plan = reference
    tokens, _ = decoders.onnx_decode(sessions["int8"], window.numpy(), plan, plan.prompt_for([]))
    text = backend._text(tokens)
    assert wer(SAMPLE_TEXT, text) <= 0.1, text


def test_a_missing_onnx_package_is_a_one_line_error_naming_the_extra(monkeypatch):
    from kvscribe.backends.onnx import export

    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    with pytest.raises(BackendUnavailableError) as raised:
        export.require()
    assert "pip install 'kvscribe[onnx]'" in raised.value.one_line()
    assert "\n" not in raised.value.one_line()
