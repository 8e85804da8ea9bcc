"""The transformers backend on the real converted model and real audio."""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kvscribe import models, profile  # noqa: E402
from kvscribe.audio import SAMPLE_RATE, load_audio  # noqa: E402
from kvscribe.chunking import MAX_SECONDS  # noqa: E402
from kvscribe.contract import DecodeRequest  # noqa: E402
from kvscribe.models.embedded import EMBEDDED  # noqa: E402
from tests import loaded  # noqa: E402
from tests.conftest import (  # noqa: E402
    EVAL_DIR,
    FOX,
    FOX_TEXT,
    LONG_FORM_HEAD,
    SAMPLE,
    SAMPLE_TEXT,
    pooled_wer,
    run_cli,
    wer,
)

pytestmark = [pytest.mark.transformers, pytest.mark.eval]

CLIPS = sorted(EVAL_DIR.glob("*.wav"))
LONG_FORM = EVAL_DIR / "espeak_longform_en.wav"
MODELS = ["tiny.en"] + (["base"] if EMBEDDED["base"].installed() else [])


@functools.cache
def _clip(path) -> tuple[np.ndarray, str]:
    """A clip's samples and reference text; of the long-form clip its first 61.5 s (three
    chunks decoded together, several windows in sequence) at a third of the decoding time."""
    samples, text = load_audio(path), path.with_suffix(".txt").read_text(encoding="utf-8")
    if path != LONG_FORM:
        return samples, text
    seconds, last_words = LONG_FORM_HEAD
    return samples[: int(seconds * SAMPLE_RATE)], text[: text.index(last_words) + len(last_words)]


def _features(samples: np.ndarray, n_mels: int) -> np.ndarray:
    from kvscribe.audio.mel import log_mel

    return log_mel(samples, n_mels)[:, :3000].numpy()[None]


def _converted_on_the_sample(name: str) -> tuple:
    """transformers' own float32 model of the converted `name`, the sample's features and
    their encoder output."""
    from transformers import WhisperForConditionalGeneration

    ref = models.resolve(name, ("transformers",))
    network = WhisperForConditionalGeneration.from_pretrained(
        str(ref.path), dtype=torch.float32
    ).eval()
    features = _features(load_audio(SAMPLE), network.config.num_mel_bins)
    with torch.inference_mode():
        encoded = network.model.encoder(torch.from_numpy(features)).last_hidden_state
    return ref, network, features, encoded


@pytest.fixture(scope="module")
def converted():
    """`_converted_on_the_sample` by model name, loaded once for the module's tests that
    only read it."""
    return functools.cache(_converted_on_the_sample)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.slow
def test_converted_model_matches_ctranslate2_logits_and_greedy_tokens(name, converted):
    import ctranslate2

    source = models.resolve(name, ("ctranslate2",))
    ref, network, features, encoded = converted(name)
    engine = ctranslate2.models.Whisper(str(source.path), device="cpu", compute_type="float32")
    config = network.generation_config
    prompt = [config.decoder_start_token_id]
    if config.is_multilingual:
        prompt += [config.lang_to_id["<|en|>"], config.task_to_id["transcribe"]]
    prompt.append(config.no_timestamps_token_id)
    result = engine.generate(
        ctranslate2.StorageView.from_array(np.ascontiguousarray(features)),
        [prompt],
        beam_size=1,
        return_logits_vocab=True,
        suppress_blank=False,
        suppress_tokens=[],
        max_length=60,
    )[0]
    ct2_tokens = result.sequences_ids[0]
    ct2_logits = np.asarray(result.logits[0]).reshape(-1, network.config.vocab_size)
    # One causal forward over CTranslate2's tokens gives every step's logits as a step-by-step
    # decode fed the same prefix would; where each step's argmax is CTranslate2's next token,
    # our own greedy decode feeds exactly that prefix, so it gives CTranslate2's tokens.
    ids = prompt + ct2_tokens[: len(ct2_logits) - 1]
    with torch.inference_mode():
        logits = network(encoder_outputs=(encoded,), decoder_input_ids=torch.tensor([ids])).logits
    ours = logits[0, len(prompt) - 1 :].numpy()
    assert ours.shape == ct2_logits.shape
    assert np.abs(ours - ct2_logits).max() < 1e-3
    assert ours.argmax(axis=-1)[: len(ct2_tokens)].tolist() == ct2_tokens
    assert wer(SAMPLE_TEXT, engine_text(ref, ct2_tokens)) <= 0.1


def engine_text(ref, tokens):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(ref.path / "tokenizer.json")).decode(tokens)


@pytest.mark.slow
def test_policy_decoder_with_a_full_cache_matches_transformers_forward(converted):
    from kvscribe.backends.transformers.decoder import PolicyDecoder
    from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
    from kvscribe.kvcache.spec import parse_cross, parse_policy

    _, network, _, encoded = converted("tiny.en")
    ids = [50257, 50362, 843, 523, 616, 5891, 3399, 1265, 407, 644, 534]
    with torch.inference_mode():
        expected = network(
            encoder_outputs=(encoded,), decoder_input_ids=torch.tensor([ids])
        ).logits[0]
    for self_policy in ("full", "full; half@layers=odd"):
        cache = PolicyCache(parse_policy(self_policy, 4))
        cross = CrossAttentionStore(parse_cross("shared"), 1)
        cross.fill(encoded, network.model.decoder)
        decoder = PolicyDecoder(network)
        rows = [decoder.logits(torch.tensor([ids[:4]]), cache, cross, positions=(0, 1, 2, 3))[0]]
        rows += [decoder.logits(torch.tensor([[t]]), cache, cross)[0] for t in ids[4:]]
        assert (torch.cat(rows) - expected).abs().max() < 1e-4


def _backend(profile_name: str, kv_self: str | None = None, kv_cross: str | None = None):
    changes = {"kv_self": kv_self} if kv_self else {}
    changes |= {"kv_cross": kv_cross} if kv_cross else {}
    return loaded.backend("transformers", profile_name, **changes)


def _decode_settings(profile_name: str, one_window: bool) -> tuple:
    """What decides a profile's decode on the CPU in float32 (tests/loaded.py): its caches
    and its transformers section; the batch size only where there is more than one window
    to batch (Backend.batch_size_for)."""
    chosen = profile.load(profile_name)
    section = dict(chosen.settings_for("transformers"), compute_type="float32")
    if one_window:
        section.pop("batch_size", None)
    return chosen.kv_self, chosen.kv_cross, tuple(sorted(section.items()))


@functools.cache
def _decoded(profile_name: str, clip, kv_self: str | None, kv_cross: str | None):
    run = _backend(profile_name, kv_self, kv_cross).transcribe(_clip(clip)[0], DecodeRequest())
    segments = list(run.segments)
    return [t for s in segments for t in s.tokens], "".join(s.text for s in segments), run.report


@functools.cache
def _results(profile_name: str, kv_self: str | None = None, kv_cross: str | None = None):
    """clip name -> (tokens, text, report) for every clip. A clip of one window that an
    earlier profile decoded with the same settings is not decoded again: gpu on the CPU is
    cpu-laptop but for its batch size, which a single window never reads."""
    results = {}
    for clip in CLIPS:
        decoder = profile_name
        if (
            kv_self is None
            and kv_cross is None
            and _clip(clip)[0].size / SAMPLE_RATE <= MAX_SECONDS
        ):
            same = _decode_settings(profile_name, True)
            decoder = next(
                (done for done in _DECODED_BY if _decode_settings(done, True) == same),
                profile_name,
            )
        results[clip.name] = _decoded(decoder, clip, kv_self, kv_cross)
    if kv_self is None and kv_cross is None:
        _DECODED_BY.append(profile_name)
    return results


_DECODED_BY: list[str] = []  # profiles whose `_results` decoded every clip, in order


@pytest.mark.slow
def test_half_layers_give_the_whole_cache_s_tokens_on_every_clip():
    """no-loss and cpu-laptop differ only in no-loss's half layers (both share one
    cross-attention copy, beam 5, batch 8, on the CPU), and both runs are the profile test's
    below. The shared copy against per-beam copies: tests/test_batched.py."""
    no_loss = _results("no-loss")
    whole = _results("cpu-laptop")
    a, b = profile.load("no-loss"), profile.load("cpu-laptop")
    # no-loss names float32, cpu-laptop's default may be bfloat16: the tests load both in
    # float32 (tests/loaded.py), so only the half layers differ here.
    sections = [
        {k: v for k, v in p.settings_for("transformers").items() if k != "compute_type"}
        for p in (a, b)
    ]
    assert a.kv_self != b.kv_self and a.kv_cross == b.kv_cross and sections[0] == sections[1]
    for name, (tokens, _, _) in no_loss.items():
        assert tokens == whole[name][0], name


@pytest.mark.parametrize("name", ["cpu-laptop", "tiny-vram", "gpu", "no-loss"])
@pytest.mark.slow
def test_every_profile_transcribes_every_clip_with_bounded_wer(name):
    results = _results(name)
    pairs = [(_clip(clip)[1], results[clip.name][1]) for clip in CLIPS]
    assert len(results) == len(CLIPS) and pooled_wer(pairs) <= 0.10


@pytest.mark.slow
def test_tiny_vram_window_holds_at_most_half_the_full_cache_on_long_form():
    report = _results("tiny-vram")[LONG_FORM.name][2]
    assert report.windows >= 3 and not report.kv_estimated
    assert report.kv_self_peak_bytes <= 0.5 * report.kv_self_full_bytes


@pytest.mark.slow
def test_q8_0_holds_at_most_28_percent_of_an_fp32_cache():
    # Greedy: the bytes held per token are the claim, not the beam (26.6 % at beam 5 too),
    # nor the clip (26.6 % on the long-form head too): the sample's window, its encoding
    # made once for the profile tests (whispercpp_jfk.wav is the same audio).
    request = DecodeRequest(beam_size=1)
    run = _backend("no-loss", kv_self="q8_0").transcribe(load_audio(SAMPLE), request)
    list(run.segments)
    assert run.report.kv_self_peak_bytes <= 0.28 * run.report.kv_self_full_bytes


def test_shared_cross_attention_at_beam_5_holds_what_beam_1_holds():
    backend = _backend("no-loss", kv_cross="shared")
    # The copy is one window's 1500 frames on any input: the sample's first 3 s, fewer tokens
    # to decode twice (the same head as the threads test below: encoded once).
    samples = load_audio(SAMPLE)[: 3 * SAMPLE_RATE]
    sizes = {}
    for beams in (1, 5):
        run = backend.transcribe(samples, DecodeRequest(beam_size=beams))
        list(run.segments)
        sizes[beams] = run.report.kv_cross_bytes
    assert sizes[5] == sizes[1] == 2 * 4 * 1500 * 384 * 4


@pytest.mark.slow
def test_cli_runs_a_custom_policy_and_reports_measured_memory(tmp_path):
    stats = tmp_path / "stats.json"
    result = run_cli(
        SAMPLE,
        "--backend",
        "transformers",
        "--kv-policy",
        "sink=4,window=64,q8_0@layers>=2",
        "--beam-size",  # the policy and its measured memory are the claim, not the beam
        "1",
        "--stats-json",
        stats,
    )
    assert result.code == 0, result.stderr
    text = " ".join(line.split("]  ", 1)[1] for line in result.stdout.splitlines())
    assert wer(SAMPLE_TEXT, text) <= 0.1
    import json

    report = json.loads(stats.read_text())
    assert report["settings"]["self-attn policy"] == "sink=4,window=64,q8_0@layers>=2"
    assert report["kv_estimated"] is False and report["kv_self_peak_bytes"] > 0
    assert report["decode_ms_per_token_p50"] <= report["decode_ms_per_token_p95"]
    assert report["encoder_seconds"] > 0 and report["first_token_seconds"] > 0
    assert "(estimated)" not in result.stderr and "decode ms / token" in result.stderr


@pytest.mark.parametrize("bad", ["window=0", "sink=4", "q8_0@layers>>1", "lru=5"])
def test_cli_rejects_a_malformed_policy_in_one_line(bad):
    result = run_cli(SAMPLE, "--backend", "transformers", "--kv-policy", bad)
    assert result.code == 2 and result.stderr.count("\n") == 1
    assert "bad cache policy part" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("device", "available"),
    [("cuda", torch.cuda.is_available()), ("mps", torch.backends.mps.is_available())],
)
@pytest.mark.slow
def test_a_missing_accelerator_is_backend_unavailable(device, available):
    if available:
        pytest.skip(f"this machine has {device}")
    result = run_cli(SAMPLE, "--backend", "transformers", "--device", device)
    assert result.code == 6 and f"no {device.upper()} device found" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_ctranslate2_model_built_since_load_does_not_decide_the_threads():
    """OpenMP's thread count is the process's, and building a CTranslate2 model sets it
    (a one-thread replica: 1). The backend sets its own again for each transcription.
    Two threads asked for, so the test means the same on any machine or test worker."""
    import ctranslate2

    laptop = profile.load("cpu-laptop")
    two = {**laptop.backends, "transformers": {**laptop.backends["transformers"], "threads": 2}}
    backend = loaded.fresh("transformers", "cpu-laptop", backends=two)
    source = models.resolve("tiny.en", ("ctranslate2",))
    ctranslate2.models.Whisper(str(source.path), device="cpu", intra_threads=1)
    assert torch.get_num_threads() == 1  # what the decode would otherwise run on
    run = backend.transcribe(load_audio(SAMPLE)[: 3 * SAMPLE_RATE], DecodeRequest(beam_size=1))
    list(run.segments)
    assert torch.get_num_threads() == backend.threads == 2
    assert run.report.settings["threads"] == "2"


def test_int8_compute_type_quantises_every_linear_layer_and_transcribes():
    """`--compute-type int8` runs on torch.ao's dynamic quantisation, deprecated in torch
    (backends/transformers/weights.py says why it stays: benchmarks/results/int8_linear.md). This
    fails loudly the day a torch release drops or changes it."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    laptop = profile.load("cpu-laptop")
    int8 = {**laptop.backends, "transformers": {**laptop.backends["transformers"]}}
    int8["transformers"]["compute_type"] = "int8"
    backend = loaded.fresh("transformers", "cpu-laptop", backends=int8)
    layers = [m for m in backend.network.modules() if isinstance(m, torch.nn.Linear)]
    quantised = [m for m in backend.network.modules() if isinstance(m, DynamicInt8Linear)]
    assert not layers and len(quantised) > 20  # tiny.en: 4 + 4 layers of attention and MLP
    assert backend.describe_settings()["compute type"] == "int8"
    run = backend.transcribe(load_audio(SAMPLE), DecodeRequest(beam_size=1))
    assert wer(SAMPLE_TEXT, "".join(s.text for s in run.segments)) <= 0.1


@pytest.mark.skipif("base" not in MODELS, reason="pip install 'kvscribe[base]'")
def test_the_window_the_language_is_detected_on_is_encoded_once():
    """A multilingual model without a language: the file's first window is encoded for the
    detection, and its decode takes that output (backends/transformers/engine.py) instead of
    encoding the window again; the text is the one decoded with the language given."""
    backend = loaded.fresh("transformers", model="base")
    encoder = backend.network.model.encoder
    passes, forward = [], encoder.forward

    def counted(*args, **kwargs):
        passes.append(args[0].shape)
        return forward(*args, **kwargs)

    encoder.forward = counted
    audio = load_audio(FOX)  # 2.9 s, a whole sentence: one window, fewer tokens than JFK's
    detected = backend.transcribe(audio, DecodeRequest(beam_size=1))
    text = "".join(segment.text for segment in detected.segments)
    assert detected.language == "en" and len(passes) == 1, passes
    given = backend.transcribe(audio, DecodeRequest(beam_size=1, language="en"))
    assert "".join(segment.text for segment in given.segments) == text
    assert wer(FOX_TEXT, text) <= 0.1
