"""The ONNX engine (backends/onnx/engine.py: kvscribe's own cache between steps, on numpy
arrays), the stepped core driving it, and the onnx backend (backends/onnx/__init__.py) through the
CLI, against the transformers backend's torch decoder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvscribe.audio import load_audio
from tests.conftest import LONG_FORM_TWO_CHUNKS, SAMPLE, SAMPLE_TEXT, run_cli, wer
from tests.onnx.conftest import NEEDS, onnx_backend

for module, why in NEEDS.items():
    pytest.importorskip(module, reason=why)

import torch  # noqa: E402

from tests.onnx import decoders  # noqa: E402

pytestmark = [pytest.mark.onnx, pytest.mark.model, pytest.mark.slow]

# -- the engine: kvscribe's own cache between steps (backends/onnx/engine.py) --------------

PROFILES = ["tiny-vram", "cpu-laptop", "no-loss", "gpu"]
POLICIES = [*PROFILES, "sink=2,window=8,q8_0|q4_0"]  # the last trims JFK's short decode


@pytest.fixture(scope="module")
def engine(exported):
    """The engine on the float32 graphs, its sessions made once for the module's tests: each
    brings its own cache and cross-attention store, all the state a decode has."""
    from kvscribe.backends.onnx.engine import OnnxEngine

    return OnnxEngine(exported, threads=int(os.environ.get("OMP_NUM_THREADS") or 1))


@pytest.fixture(scope="module")
def onnx_encoded(engine, window):
    """The engine's encoding of JFK's window, made once: the encoder graph is a pure function
    of the window, and nothing writes its output (EncodedChunks)."""
    return engine.encode(window.numpy())


def _self_and_cross(policy: str) -> tuple[str, str]:
    """A built-in profile's self and cross policies, or those written `self|cross`."""
    from kvscribe import profile

    if policy in PROFILES:
        chosen = profile.load(policy)
        return chosen.kv_self, chosen.kv_cross
    kv_self, kv_cross = policy.split("|")
    return kv_self, kv_cross


def _engine_runs(policy: str) -> tuple:
    """What the engine decodes under `policy`: its self specs (half layers run as full
    ones), the notes saying so, and its cross spec."""
    from kvscribe.backends.onnx.engine import applicable_specs
    from kvscribe.kvcache.spec import parse_cross, parse_policy

    kv_self, kv_cross = _self_and_cross(policy)
    specs, notes = applicable_specs(parse_policy(kv_self, 4))
    return specs, notes, parse_cross(kv_cross)


def _alike(policies: list[str]) -> list[tuple[str, ...]]:
    """The policies grouped by what the engine decodes under (cpu-laptop's and gpu's are the
    same, and no-loss's once its half layers run whole): one decode holds for a group."""
    groups: dict[tuple, list[str]] = {}
    for policy in policies:
        specs, _, cross_spec = _engine_runs(policy)
        groups.setdefault((specs, cross_spec), []).append(policy)
    return [tuple(group) for group in groups.values()]


@pytest.mark.parametrize("policies", _alike(POLICIES), ids="+".join)
def test_the_engine_under_each_policy_decodes_torchs_tokens_holding_what_it_reports(
    engine, reference, window, policies
):
    """Greedy over JFK with the cache in numpy arrays (kvscribe.kvcache on numpy), each
    built-in profile's self and cross policies (half layers run as full ones: not
    applicable to a graph that takes K/V), and one that trims JFK's short decode: the
    tokens of the torch decoder under the same policy, and at every step the bytes the
    cache reports are the bytes an independent walk of it finds. Policies the engine runs
    alike are decoded once."""
    from kvscribe.kvcache.spec import parse_policy

    backend, plan = reference
    runs = set()
    for policy in policies:
        specs, notes, cross_spec = _engine_runs(policy)
        kv_self, _ = _self_and_cross(policy)
        assert bool(notes) == any(spec.half for spec in parse_policy(kv_self, 4))
        runs.add((specs, cross_spec))
    ((specs, cross_spec),) = runs  # the group's one decode is each policy's
    walked = []
    tokens, cache = decoders.engine_greedy(
        engine, window.numpy(), plan, specs, cross_spec, lambda c: walked.append(c)
    )
    assert tokens == decoders.torch_greedy(backend, plan, window, specs, cross_spec)
    assert walked and all(reported == held for reported, held in walked)
    if policies[0].startswith("sink=2"):  # trimmed: 2 sinks + 8 newest of every token seen
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
        "from kvscribe.backends.onnx.engine import OnnxEngine\n"
        "from kvscribe.backends.onnx.export import OnnxExport\n"
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


def test_the_word_aligners_import_no_torch():
    """The core aligner and the ONNX engine's, imported in a fresh interpreter: neither
    brings torch in (the onnx backend's word timestamps run without it)."""
    code = (
        "import sys\n"
        "import kvscribe.stepped.alignment, kvscribe.backends.onnx.alignment\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


def test_the_onnx_word_aligner_times_jfk_as_the_transformers_one(
    engine, onnx_encoded, reference, window
):
    """The core aligner (kvscribe/stepped/alignment.py) on the ONNX engine's step and on the
    transformers network's PolicyDecoder, given JFK's greedy tokens: the same words, each
    start and end within one encoder frame."""
    from kvscribe.audio.mel import HOP
    from kvscribe.backends.onnx.alignment import onnx_word_aligner
    from kvscribe.backends.transformers.alignment import WordAligner

    backend, plan = reference
    tokens = decoders.torch_greedy(backend, plan, window)
    window_frames = load_audio(SAMPLE).size // HOP
    aligner = onnx_word_aligner(engine, backend.special, backend._text)
    ours = aligner.chunk_words(onnx_encoded, tokens, window_frames)
    with torch.inference_mode():
        encoded = backend.network.model.encoder(window)
    torch_aligner = WordAligner(
        backend.network, backend.special, backend._text, "cpu", backend.dtype
    )
    theirs = torch_aligner.chunk_words(encoded, tokens, window_frames)
    assert len(ours) > 15 and [w.word for w in ours] == [w.word for w in theirs]
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.start == pytest.approx(other.start, abs=0.02)
        assert mine.end == pytest.approx(other.end, abs=0.02)
        assert mine.probability == pytest.approx(other.probability, abs=1e-3)


def test_language_detection_reads_the_engine_as_it_reads_torch(
    engine, onnx_encoded, reference, window
):
    """kvscribe.stepped.language on the ONNX engine and on the transformers network, JFK's
    window: the same language token wins with the same probability (an English-only model
    still scores every language token, so the arithmetic is compared in full)."""
    from kvscribe.kvcache.spec import CrossSpec, LayerSpec
    from kvscribe.stepped.language import detect_language

    backend, plan = reference
    specs = (tuple(LayerSpec() for _ in range(engine.layers)), CrossSpec(shared=True))

    def fill(cross, encoded):
        cross.fill_projected(encoded)

    ours = detect_language(engine, fill, onnx_encoded, plan.special, *specs, None)
    with torch.inference_mode():
        encoded = backend.network.model.encoder(window)
    decoder = plan.setup.decoder
    device = torch.device("cpu")
    theirs = detect_language(decoder, plan.fill_cross, encoded, plan.special, *specs, device)
    assert ours[0] == theirs[0] and 0 < ours[1] <= 1
    assert ours[1] == pytest.approx(theirs[1], abs=1e-4)


@pytest.mark.parametrize("beams", [1, 5])
def test_the_core_search_drives_the_engine_to_torchs_tokens(
    engine, onnx_encoded, reference, window, beams
):
    """kvscribe.stepped.search (greedy and beam search, the transformers backend's own) with
    the ONNX engine as its decoder and numpy masks: the tokens and summed log-probability
    torch's decoder gives, under tiny-vram's policies (4 sinks + 128 newest in Q8_0; one
    shared Q8_0 cross copy for the beams)."""
    from kvscribe.contract import DecodeRequest
    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.kvcache.spec import parse_cross, parse_policy
    from kvscribe.stepped.rules import TokenRules
    from kvscribe.stepped.search import SearchSetup, search

    backend, plan = reference
    specs, cross_spec = parse_policy("sink=4,window=128,q8_0", 4), parse_cross("shared,q8_0")
    suppressed = backend.vocab.suppressed(DecodeRequest().suppress_tokens)
    rules = TokenRules(backend.special, 51864, suppressed, timestamps=False, device=None)
    numpy_setup = SearchSetup(engine, rules, plan.setup.eot, plan.setup.no_speech, None)
    prompt = plan.prompt_for([])
    sot, most = plan.sot_index(prompt), plan.max_new(len(prompt))
    results = []
    for setup in (numpy_setup, plan.setup):
        cross = CrossAttentionStore(cross_spec, beams)
        if setup is numpy_setup:
            cross.fill_projected(onnx_encoded)
        else:
            with torch.inference_mode():
                encoded = backend.network.model.encoder(window)
                cross.fill(encoded, backend.network.model.decoder)
        results.append(search(setup, prompt, sot, PolicyCache(specs), cross, beams, most))
    ours, theirs = results
    assert ours.tokens == theirs.tokens and len(ours.tokens) > 20
    assert ours.sum_logprob == pytest.approx(theirs.sum_logprob, abs=1e-2)
    assert ours.no_speech_prob == pytest.approx(theirs.no_speech_prob, abs=1e-4)


def test_temperature_draws_drive_the_engine_with_numpy_generators(engine, onnx_encoded, reference):
    """The fallback's sampling (kvscribe.stepped.search.sample) on the ONNX engine: numpy
    generators seeded as the fallback seeds them, so the same window draws the same text
    again, and at a low temperature it is still JFK."""
    from kvscribe.contract import DecodeRequest
    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.stepped import fallback
    from kvscribe.stepped.rules import TokenRules
    from kvscribe.stepped.search import SearchSetup, sample

    backend, plan = reference
    suppressed = backend.vocab.suppressed(DecodeRequest().suppress_tokens)
    rules = TokenRules(backend.special, 51864, suppressed, timestamps=False, device=None)
    setup = SearchSetup(engine, rules, plan.setup.eot, plan.setup.no_speech, None)
    prompt = plan.prompt_for([])
    texts = []
    for _ in range(2):
        cross = CrossAttentionStore(plan.cross_spec, 2)  # best_of 2
        cross.fill_projected(onnx_encoded)
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


# -- the onnx backend (backends/onnx/__init__.py): `kvscribe FILE --backend onnx` ------------


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
    # A copy of the cross-attention K/V per beam (`full`, what a profile without [kv] asks
    # for) cannot feed the step graph: it crashed onnxruntime; now the copy is shared.
    policies = ("--kv-policy", "full; half@layers=odd", "--kv-cross", "full")
    half = _onnx_cli(cache, *args, *policies, "--beam-size", "5")
    assert half.code == 0, half.stderr
    assert wer(SAMPLE_TEXT, half.stdout) <= 0.1, half.stdout
    notes = json.loads(stats.read_text())["not_applicable"]
    assert any("half layers" in note for note in notes), notes
    assert any("'per-beam': the ONNX step graph" in note for note in notes), notes


# LONG_FORM_TWO_CHUNKS (tests/conftest.py): two 30 s windows, the second sought to from the
# first's last timestamp and prompted with its text.
TWO_WINDOWS = LONG_FORM_TWO_CHUNKS


def test_the_onnx_backend_decodes_long_form_windows_in_sequence(
    exported, reference, long_form_head
):
    """41.2 s: two 30 s windows with previous-text prompts and seeking, the stepped core's
    long-form path on the ONNX engine; the transformers backend's words, within a few."""
    from kvscribe.audio import SAMPLE_RATE
    from kvscribe.contract import DecodeRequest

    seconds, last_words = TWO_WINDOWS
    backend = onnx_backend(exported, "cpu-laptop")
    audio = load_audio(long_form_head)[: int(seconds * SAMPLE_RATE)]
    request = DecodeRequest(beam_size=1, batch_size=1)
    run = backend.transcribe(audio, request)
    segments = list(run.segments)
    theirs = list(reference[0].transcribe(audio, request).segments)
    text = " ".join(s.text for s in segments)
    assert run.report.windows >= 2 and [s.start for s in segments] == sorted(
        s.start for s in segments
    )
    head_text = long_form_head.with_suffix(".txt").read_text(encoding="utf-8")
    reference_text = head_text[: head_text.index(last_words) + len(last_words)]
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
