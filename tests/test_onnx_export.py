"""`kvscribe setup onnx` (kvscribe/onnx): the embedded tiny.en exported for real into a
temporary cache, then run with onnxruntime (CPU) and numpy alone, the K/V cache kept in
numpy lists the test grows and trims itself, against the transformers backend's torch
modules (backends/hf): the same cross-attention K/V, the same greedy tokens and per-step
logits, the same logits under a sliding window with positions counting on, beams folded into
the queries of one cross-attention copy per chunk, and an int8 export that still transcribes.

The greedy comparison decodes without timestamps (<|notimestamps|> in the prompt, the
batched chunks' way): the suppression masks are the backend's own (TokenRules), and without
timestamp rules a greedy step is an argmax of the masked logits, which numpy does alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the onnx extra is not installed: pip install 'kvscribe[onnx]'")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from kvscribe.audio import SAMPLE_RATE, load_audio  # noqa: E402
from kvscribe.errors import BackendUnavailableError  # noqa: E402
from kvscribe.mel import log_mel  # noqa: E402
from tests import loaded  # noqa: E402
from tests.conftest import SAMPLE, SAMPLE_TEXT, run_cli, wer  # noqa: E402

pytestmark = [pytest.mark.onnx, pytest.mark.model, pytest.mark.slow]

# float32 graphs against float32 torch: the same weights, other kernels (measured on tiny.en:
# at most 3.7e-5 apart over the greedy decode, 5.1e-5 under the window; logits span ~30).
LOGIT_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def exported(cache):
    """`kvscribe setup onnx --compute-type int8` run for real into the module's own cache."""
    from kvscribe.onnx.export import OnnxExport

    with pytest.MonkeyPatch.context() as env:
        env.setenv("KVSCRIBE_CACHE_DIR", str(cache))
        result = run_cli("setup", "onnx", "--compute-type", "int8")
    assert result.code == 0, result.stderr
    path = Path(result.stdout.strip())
    return OnnxExport(path, json.loads((path / "manifest.json").read_text()))


@pytest.fixture(scope="module")
def sessions(exported):
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS") or 1)

    def session(role: str, kind: str):
        path = str(exported.graph(role, kind))
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    return {
        kind: (session("encoder", kind), session("decoder_step", kind))
        for kind in exported.manifest["graphs"]
    }


@pytest.fixture(scope="module")
def reference():
    """The transformers backend (profile cpu-laptop: full self-attention cache, one shared
    cross copy, float32) and its plan for a greedy decode without timestamps."""
    backend = loaded.backend("transformers")
    plan = backend._plan("en", "transcribe", 1, timestamps=False)
    return backend, plan


@pytest.fixture(scope="module")
def window():
    """The log-mel of JFK's first (and only) 30 s window [1, 80, 3000]."""
    return log_mel(torch.from_numpy(load_audio(SAMPLE)), 80)[None, :, :3000]


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
    again = run_cli("setup", "onnx", "--compute-type", "int8")
    assert again.code == 0, again.stderr
    assert "nothing to do" in again.stderr and again.stdout.strip() == str(exported.path)
    assert {p.name: p.stat().st_mtime_ns for p in exported.path.iterdir()} == before


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


def test_greedy_tokens_and_every_steps_logits_equal_the_transformers_backend(
    sessions, reference, window
):
    backend, plan = reference
    prompt = plan.prompt_for([])
    expected = _torch_greedy(backend, plan, window)
    tokens, logits = _onnx_decode(sessions["float32"], window.numpy(), plan, prompt)
    assert tokens == expected and len(tokens) > 20
    theirs = _torch_logits(backend, window, prompt, tokens, "full")
    worst = max(float(np.abs(a - b).max()) for a, b in zip(logits, theirs, strict=True))
    assert worst < LOGIT_TOLERANCE, worst


def test_a_sliding_window_cache_with_counting_positions_equals_torchs(sessions, reference, window):
    backend, plan = reference
    prompt = plan.prompt_for([])
    tokens = _torch_greedy(backend, plan, window)
    full = _torch_logits(backend, window, prompt, tokens, "full")
    theirs = _torch_logits(backend, window, prompt, tokens, "window=4")
    _, ours = _onnx_decode(sessions["float32"], window.numpy(), plan, prompt, tokens, keep=4)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))
    assert worst < LOGIT_TOLERANCE, worst
    assert max(float(np.abs(a - b).max()) for a, b in zip(ours, full, strict=True)) > 0.1
    # Positions that restart at the kept count (what a trimmed cache's length would say)
    # are another model input: the logits move.
    _, wrong = _onnx_decode(
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
        folded = step.run(None, _feed(step, tokens, positions, past, cross))
        copies = [np.repeat(part, beams, axis=0) for part in cross]
        per_row = step.run(None, _feed(step, tokens, positions, past, copies))
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
    tokens, _ = _onnx_decode(sessions["int8"], window.numpy(), plan, plan.prompt_for([]))
    text = backend._text(tokens)
    assert wer(SAMPLE_TEXT, text) <= 0.1, text


def test_a_missing_onnx_package_is_a_one_line_error_naming_the_extra(monkeypatch):
    from kvscribe.onnx import export

    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    with pytest.raises(BackendUnavailableError) as raised:
        export.require()
    assert "pip install 'kvscribe[onnx]'" in raised.value.one_line()
    assert "\n" not in raised.value.one_line()


# -- the two decoders ---------------------------------------------------------------------


def _onnx_decode(graphs, features, plan, prompt, forced=None, keep=None, count_kept=False):
    """Greedy (or `forced` tokens) with the ONNX graphs, numpy only. The K/V cache is a list
    of arrays grown by each step's new K/V and cut to the newest `keep` entries; positions
    count every token seen (or, with `count_kept`, restart at the kept count). Returns the
    tokens and each step's logits [vocab] (the first is the prompt's last position)."""
    encoder, step = graphs
    cross = encoder.run(None, {"features": features})
    rules = plan.setup.rules
    first, later = rules.first.numpy(), rules.later.numpy()
    past = [np.zeros((1, 6, 0, 64), np.float32) for _ in range(len(cross))]
    tokens, logits, fed, seen = [], [], list(prompt), 0
    for _ in range(plan.max_new(len(prompt))):
        start = past[0].shape[2] if count_kept else seen
        positions = np.arange(start, start + len(fed))[None]
        out = step.run(None, _feed(step, np.array([fed]), positions, past, cross))
        seen += len(fed)
        past = [np.concatenate([p, n], axis=2) for p, n in zip(past, out[1:-1], strict=True)]
        if keep is not None:
            past = [p[:, :, -keep:] for p in past]
        logits.append(out[0][0, -1])
        if forced is not None:
            if len(tokens) == len(forced):
                break
            token = forced[len(tokens)]
        else:
            token = int(np.where(later if tokens else first, -np.inf, logits[-1]).argmax())
            if token == plan.setup.eot:
                break
        tokens.append(token)
        fed = [token]
    return tokens, logits


def _feed(step, tokens, positions, past, cross) -> dict:
    names = [i.name for i in step.get_inputs()]
    values = [tokens.astype(np.int64), positions.astype(np.int64), *past, *cross]
    return dict(zip(names, values, strict=True))


def _torch_greedy(backend, plan, window, specs=None, cross_spec=None) -> list[int]:
    """The transformers backend's own greedy search (kvscribe/stepped/search.py) on the window,
    under the plan's cache policies or `specs` and `cross_spec`."""
    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.stepped.search import search

    prompt = plan.prompt_for([])
    cross = CrossAttentionStore(cross_spec or plan.cross_spec, 1)
    with torch.inference_mode():
        cross.fill(backend.network.model.encoder(window), backend.network.model.decoder)
    cache = PolicyCache(specs or plan.self_specs)
    sot, most = plan.sot_index(prompt), plan.max_new(len(prompt))
    result = search(plan.setup, prompt, sot, cache, cross, 1, most)
    return result.tokens


def _torch_logits(backend, window, prompt, tokens, policy: str) -> list[np.ndarray]:
    """Each step's logits from the backend's PolicyDecoder under `policy`, fed `tokens`."""
    from kvscribe.backends.hf.decoder import PolicyDecoder

    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.kvcache.spec import parse_cross, parse_policy

    decoder = PolicyDecoder(backend.network)
    layers = backend.network.config.decoder_layers
    cross = CrossAttentionStore(parse_cross("shared"), 1)
    cache = PolicyCache(parse_policy(policy, layers))
    with torch.inference_mode():
        cross.fill(backend.network.model.encoder(window), backend.network.model.decoder)
        out = [decoder.logits(torch.tensor([prompt]), cache, cross)[0, -1].numpy()]
        for token in tokens:
            out.append(decoder.logits(torch.tensor([[token]]), cache, cross)[0, -1].numpy())
    return out


# -- the engine: kvscribe's own cache between steps (kvscribe/onnx/engine.py) --------------

PROFILES = ["tiny-vram", "cpu-laptop", "no-loss", "gpu"]


@pytest.mark.parametrize("policy", [*PROFILES, "sink=2,window=8,q8_0|q4_0"])
def test_the_engine_under_each_policy_decodes_torchs_tokens_holding_what_it_reports(
    exported, reference, window, policy
):
    """Greedy over JFK with the cache in numpy arrays (kvscribe.kvcache on numpy), each
    built-in profile's self and cross policies (half layers run as full ones: not
    applicable to a graph that takes K/V), and one that trims JFK's short decode: the
    tokens of the torch decoder under the same policy, and at every step the bytes the
    cache reports are the bytes an independent walk of it finds."""
    from kvscribe import profile
    from kvscribe.kvcache.spec import parse_cross, parse_policy
    from kvscribe.onnx.engine import OnnxEngine, applicable_specs

    backend, plan = reference
    chosen = profile.load(policy) if policy in PROFILES else None
    kv_self, kv_cross = (chosen.kv_self, chosen.kv_cross) if chosen else policy.split("|")
    specs, notes = applicable_specs(parse_policy(kv_self, 4))
    assert bool(notes) == any(spec.half for spec in parse_policy(kv_self, 4))
    cross_spec = parse_cross(kv_cross)
    engine = OnnxEngine(exported, threads=int(os.environ.get("OMP_NUM_THREADS") or 1))
    walked = []
    tokens, cache = _engine_greedy(
        engine, window.numpy(), plan, specs, cross_spec, lambda c: walked.append(c)
    )
    assert tokens == _torch_greedy(backend, plan, window, specs, cross_spec)
    assert walked and all(reported == held for reported, held in walked)
    if policy.startswith("sink=2"):  # trimmed: 2 sinks + 8 newest of every token seen
        assert cache.policy_layers[0].stored == 10 < cache.get_seq_length()


def test_an_engine_run_imports_no_torch(exported, tmp_path):
    """The run-time path is onnxruntime and numpy: encode a window and take two steps in a
    fresh interpreter, then look for torch in sys.modules."""
    import subprocess

    script = tmp_path / "run.py"
    script.write_text(
        "import json, sys\n"
        "from pathlib import Path\n"
        "import numpy as np\n"
        "from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache\n"
        "from kvscribe.kvcache.spec import parse_cross, parse_policy\n"
        "from kvscribe.onnx.engine import OnnxEngine\n"
        "from kvscribe.onnx.export import OnnxExport\n"
        "path = Path(sys.argv[1])\n"
        "engine = OnnxEngine(OnnxExport(path, json.loads((path / 'manifest.json').read_text())),"
        " threads=1)\n"
        "cross = CrossAttentionStore(parse_cross('shared,q8_0'), 1)\n"
        "cross.fill_projected(engine.encode(np.zeros((1, 80, 3000), np.float32)))\n"
        "cache = PolicyCache(parse_policy('sink=4,window=128,q8_0', engine.layers))\n"
        "engine.step(np.array([[50257, 50362]]), cache, cross)\n"
        "out = engine.step(np.array([[440]]), cache, cross)\n"
        "print(out.logits.shape, cache.get_seq_length(), 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), str(exported.path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "1,", "51864)", "3", "False"]


def _engine_greedy(engine, features, plan, specs, cross_spec, on_step):
    """Greedy without timestamps through OnnxEngine; `on_step` hears (reported, walked)
    bytes after every step. Returns the tokens and the cache."""
    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from tests.kv_storage import reachable_storage_bytes

    prompt = plan.prompt_for([])
    cross = CrossAttentionStore(cross_spec, 1)
    cross.fill_projected(engine.encode(features))
    cache = PolicyCache(specs)
    first, later = plan.setup.rules.first.numpy(), plan.setup.rules.later.numpy()
    tokens, fed = [], list(prompt)
    for _ in range(plan.max_new(len(prompt))):
        logits = engine.step(np.array([fed]), cache, cross).logits[0, -1]
        on_step((cache.held_bytes, reachable_storage_bytes(cache)))
        token = int(np.where(later if tokens else first, -np.inf, logits).argmax())
        if token == plan.setup.eot:
            break
        tokens.append(token)
        fed = [token]
    return tokens, cache


@pytest.mark.parametrize("beams", [1, 5])
def test_the_core_search_drives_the_engine_to_torchs_tokens(exported, reference, window, beams):
    """kvscribe.stepped.search (greedy and beam search, the transformers backend's own) with
    the ONNX engine as its decoder and numpy masks: the tokens and summed log-probability
    torch's decoder gives, under tiny-vram's policies (4 sinks + 128 newest in Q8_0; one
    shared Q8_0 cross copy for the beams)."""
    from kvscribe.backends.base import DecodeRequest

    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.kvcache.spec import parse_cross, parse_policy
    from kvscribe.onnx.engine import OnnxEngine
    from kvscribe.stepped.rules import TokenRules
    from kvscribe.stepped.search import SearchSetup, search

    backend, plan = reference
    specs, cross_spec = parse_policy("sink=4,window=128,q8_0", 4), parse_cross("shared,q8_0")
    engine = OnnxEngine(exported, threads=int(os.environ.get("OMP_NUM_THREADS") or 1))
    suppressed = backend._suppressed(DecodeRequest().suppress_tokens)
    rules = TokenRules(backend.special, 51864, suppressed, timestamps=False, device=None)
    numpy_setup = SearchSetup(engine, rules, plan.setup.eot, plan.setup.no_speech, None)
    prompt = plan.prompt_for([])
    sot, most = plan.sot_index(prompt), plan.max_new(len(prompt))
    results = []
    for setup in (numpy_setup, plan.setup):
        cross = CrossAttentionStore(cross_spec, beams)
        if setup is numpy_setup:
            cross.fill_projected(engine.encode(window.numpy()))
        else:
            with torch.inference_mode():
                encoded = backend.network.model.encoder(window)
                cross.fill(encoded, backend.network.model.decoder)
        results.append(search(setup, prompt, sot, PolicyCache(specs), cross, beams, most))
    ours, theirs = results
    assert ours.tokens == theirs.tokens and len(ours.tokens) > 20
    assert ours.sum_logprob == pytest.approx(theirs.sum_logprob, abs=1e-2)
    assert ours.no_speech_prob == pytest.approx(theirs.no_speech_prob, abs=1e-4)


def test_temperature_draws_drive_the_engine_with_numpy_generators(exported, reference, window):
    """The fallback's sampling (kvscribe.stepped.search.sample) on the ONNX engine: numpy
    generators seeded as the fallback seeds them, so the same window draws the same text
    again, and at a low temperature it is still JFK."""
    from kvscribe.backends.base import DecodeRequest

    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.onnx.engine import OnnxEngine
    from kvscribe.stepped import fallback
    from kvscribe.stepped.rules import TokenRules
    from kvscribe.stepped.search import SearchSetup, sample

    backend, plan = reference
    engine = OnnxEngine(exported, threads=int(os.environ.get("OMP_NUM_THREADS") or 1))
    suppressed = backend._suppressed(DecodeRequest().suppress_tokens)
    rules = TokenRules(backend.special, 51864, suppressed, timestamps=False, device=None)
    setup = SearchSetup(engine, rules, plan.setup.eot, plan.setup.no_speech, None)
    prompt = plan.prompt_for([])
    encoded = engine.encode(window.numpy())
    texts = []
    for _ in range(2):
        cross = CrossAttentionStore(plan.cross_spec, 2)  # best_of 2
        cross.fill_projected(encoded)
        (result,) = sample(
            setup,
            prompt,
            plan.sot_index(prompt),
            PolicyCache(plan.self_specs),
            cross,
            0.2,
            [fallback.generator(None, 0, 1)],
            plan.max_new(len(prompt)),
        )
        texts.append(backend._text(result.tokens))
    assert texts[0] == texts[1] and wer(SAMPLE_TEXT, texts[0]) <= 0.2, texts


# -- the onnx backend (backends/onnx.py): `kvscribe FILE --backend onnx` --------------------


def _onnx_cli(cache: Path, *args):
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KVSCRIBE_CACHE_DIR", str(cache))
        return run_cli(*args)


def test_the_onnx_backend_transcribes_under_a_profile_with_measured_kv(exported, cache, tmp_path):
    """tiny-vram through the CLI, on the int8 graphs: its window, sinks and Q8_0 stores
    apply, and the KV figures are measured; a half-layer policy is reported not applicable
    (the step graph takes K/V) and runs those layers whole."""
    stats = tmp_path / "stats.json"
    args = [SAMPLE, "--backend", "onnx", "-f", "txt", "--stats-json", stats]
    result = _onnx_cli(cache, *args, "-p", "tiny-vram", "--compute-type", "int8")
    assert result.code == 0, result.stderr
    assert wer(SAMPLE_TEXT, result.stdout) <= 0.1, result.stdout
    report = json.loads(stats.read_text())
    assert report["settings"]["compute type"] == "int8"
    assert report["settings"]["self-attn policy"] == "sink=4,window=128,q8_0"
    assert report["kv_provenance"] == {"self": "measured", "cross": "measured"}
    assert 0 < report["kv_self_peak_bytes"] < report["kv_self_full_bytes"]
    half = _onnx_cli(cache, *args, "--kv-policy", "full; half@layers=odd")
    assert half.code == 0, half.stderr
    assert any("half layers" in note for note in json.loads(stats.read_text())["not_applicable"])


def test_the_onnx_backend_decodes_long_form_windows_in_sequence(
    exported, reference, long_form_head
):
    """61.5 s: three 30 s windows with previous-text prompts and seeking, the stepped core's
    long-form path on the ONNX engine; the transformers backend's words, within a few."""
    from kvscribe.backends.base import DecodeRequest

    from kvscribe import models, profile, registry

    with pytest.MonkeyPatch.context() as env:
        env.setenv("KVSCRIBE_CACHE_DIR", str(exported.path.parent.parent))
        backend_cls = registry.get("onnx")
        model = models.resolve(None, backend_cls.capabilities.model_formats)
        backend = backend_cls(model, profile.load("cpu-laptop"), "cpu")
        backend.load()
    audio = load_audio(long_form_head)
    request = DecodeRequest(beam_size=1, batch_size=1)
    run = backend.transcribe(audio, request)
    segments = list(run.segments)
    theirs = list(reference[0].transcribe(audio, request).segments)
    text = " ".join(s.text for s in segments)
    assert run.report.windows >= 3 and [s.start for s in segments] == sorted(
        s.start for s in segments
    )
    reference_text = long_form_head.with_suffix(".txt").read_text(encoding="utf-8")
    assert wer(reference_text, text) <= 0.15
    assert wer(" ".join(s.text for s in theirs), text) <= 0.03


def test_an_onnx_run_without_an_export_is_one_line_naming_the_set_up(tmp_path):
    result = _onnx_cli(tmp_path / "empty-cache", SAMPLE, "--backend", "onnx")
    assert result.code == 5, result.stderr  # model not found
    assert "kvscribe setup onnx" in result.stderr and result.stderr.count("\n") == 1


def test_a_cli_run_on_the_onnx_backend_imports_no_torch(exported, cache, tmp_path):
    script = tmp_path / "run.py"
    script.write_text(
        "import atexit, sys\n"
        "def report():\n"
        "    sys.stderr.write(f'torch loaded: {\"torch\" in sys.modules}\\n')\n"
        "atexit.register(report)\n"
        "from kvscribe.cli.app import main\n"
        "sys.argv = ['kvscribe', *sys.argv[1:]]\n"
        "main()\n"
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KVSCRIBE_CACHE_DIR", str(cache))
        done = subprocess.run(
            [sys.executable, str(script), str(SAMPLE), "--backend", "onnx", "-q"],
            capture_output=True,
            text=True,
        )
    assert done.returncode == 0, done.stderr
    assert "torch loaded: False" in done.stderr and "Americans" in done.stdout
