"""A CTranslate2 model's int8 copy (kvscribe/models/ct2_int8.py, store.int8_weights): the numbers a
load in int8 makes of the float model, so the same encoder outputs, tokens, scores and word
alignment on real speech; written once into the cache; the model itself where the cache
cannot take it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.models import ct2_file, ct2_int8, store
from tests import loaded
from tests.conftest import EVAL_DIR, SAMPLE

pytestmark = pytest.mark.model

JOINED_REAL = EVAL_DIR.parent / "clips_joined" / "joined_real.wav"


@pytest.fixture(scope="module")
def embedded():
    return store.resolve(None, ("ctranslate2",))


@pytest.fixture(scope="module")
def copy(embedded, tmp_path_factory):
    return ct2_int8.write(embedded.path, tmp_path_factory.mktemp("int8") / "tiny.en-int8")


def test_the_copy_reads_as_the_float_model_loaded_in_int8(embedded, copy):
    import ctranslate2
    from faster_whisper import WhisperModel

    loads = [
        WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=1)
        for path in (embedded.path, copy)
    ]
    float_model, int8_model = (engine.model for engine in loads)
    assert int8_model.compute_type == float_model.compute_type
    vocabulary = loads[0].hf_tokenizer
    prompt = [vocabulary.token_to_id(t) for t in ("<|startoftranscript|>", "<|notimestamps|>")]
    for clip in (SAMPLE, JOINED_REAL):
        audio = load_audio(clip)[: 30 * SAMPLE_RATE]
        mel = loads[0].feature_extractor(audio)[:, :3000]
        mel = np.pad(mel, ((0, 0), (0, 3000 - mel.shape[1])))
        window = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None]))
        encoded = [np.asarray(model.encode(window)) for model in (float_model, int8_model)]
        np.testing.assert_array_equal(encoded[1], encoded[0])  # bit for bit
        memory = ctranslate2.StorageView.from_array(encoded[0])
        found = [
            model.generate(memory, [prompt], beam_size=5, return_scores=True)[0]
            for model in (float_model, int8_model)
        ]
        assert found[1].sequences_ids == found[0].sequences_ids
        assert len(found[0].sequences_ids[0]) > 10  # real speech read
        assert found[1].scores == found[0].scores
        tokens = found[0].sequences_ids[0]
        aligned = [
            model.align(memory, prompt[:1], [tokens], [1500])[0]
            for model in (float_model, int8_model)
        ]
        assert aligned[1].alignments == aligned[0].alignments
        assert aligned[1].text_token_probs == aligned[0].text_token_probs


def test_the_copy_holds_int8_weights_their_scales_and_the_rest_as_it_was(embedded, copy):
    source = ct2_file.read_variables(embedded.path / ct2_int8.MODEL_FILE)
    written = ct2_file.read_variables(copy / ct2_int8.MODEL_FILE)
    stored = {name: v for name, v in source.items() if name == v.name}  # not the aliases
    quantized = [name for name, v in stored.items() if ct2_int8.quantizes(name, v)]
    assert (
        "decoder/embeddings/weight" in quantized
        and "encoder/layer_0/ffn/linear_0/weight" in quantized
    )
    assert not any(name.startswith("encoder/conv") for name in quantized)
    for name, variable in stored.items():
        if name in quantized:
            assert written[name].dtype == "int8" and written[name].shape == variable.shape
            assert written[f"{name}_scale"].shape == variable.shape[:1]
        else:
            assert (written[name].dtype, written[name].shape) == (variable.dtype, variable.shape)
    # the output projection stays an alias of the embeddings, as in the source
    assert written["decoder/projection/weight"] is written["decoder/embeddings/weight"]
    assert ct2_file.read_header(copy / "model.bin") == ct2_file.read_header(
        embedded.path / "model.bin"
    )
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in embedded.path.iterdir())
    assert not ct2_int8.worth_writing(copy)  # nothing left to quantize
    assert ct2_file.whisper_dims(copy / "model.bin") == ct2_file.whisper_dims(
        embedded.path / "model.bin"
    )


def test_the_copy_is_written_once_into_the_cache(embedded, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(tmp_path / "cache"))
    first = store.int8_weights(embedded)
    assert first.path.parent == tmp_path / "cache" / "models"
    assert first.path.name.startswith("tiny.en-ctranslate2-int8-v1-")
    made = (first.path / "model.bin").stat().st_mtime_ns
    again = store.int8_weights(embedded)
    assert again.path == first.path and (again.path / "model.bin").stat().st_mtime_ns == made
    assert store.int8_weights(again) == again  # an int8 model is taken as it is
    leftovers = [p.name for p in first.path.parent.iterdir() if p.name.startswith(".tiny")]
    assert leftovers == []  # no staging folder left behind


def test_writers_of_the_same_copy_at_once_leave_one_whole_copy(embedded, tmp_path):
    target = tmp_path / "models" / "tiny.en-int8"
    written: list = []
    writers = [
        threading.Thread(target=lambda: written.append(ct2_int8.write(embedded.path, target)))
        for _ in range(3)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    assert written == [target] * 3
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny.en-int8"]  # no staging left
    assert not ct2_int8.worth_writing(target)  # a whole int8 model
    assert ct2_file.whisper_dims(target / "model.bin") == ct2_file.whisper_dims(
        embedded.path / "model.bin"
    )


def test_a_cache_that_cannot_take_the_copy_leaves_the_model_as_it_is(
    embedded, tmp_path, monkeypatch
):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("KVSCRIBE_CACHE_DIR", str(blocked / "cache"))  # under a file: mkdir fails
    assert store.int8_weights(embedded) == embedded


def test_the_backend_loads_the_copy_on_a_cpu_in_int8(embedded):
    backend = loaded.backend("ctranslate2")
    assert backend.engine.model.compute_type.startswith("int8")
    assert backend._choice.weights != embedded.path and backend._choice.weights.name.startswith(
        "tiny.en-ctranslate2-int8"
    )
    # CTranslate2's encoder, set: the weights are chosen before the encoder, and "auto" would
    # export and time a float32 onnxruntime graph no other test runs (6 CPU s).
    float32 = loaded.ctranslate2_on_threads(1, compute_type="float32", encoder="ctranslate2")
    assert float32._choice.weights == embedded.path  # float32 reads the model's own weights
