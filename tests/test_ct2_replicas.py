"""Decoder calls on single-thread CTranslate2 replicas (backends/ctranslate2/replicas.py): batched
rows shared out, and one row's calls, give the same encoder outputs, tokens and word times
as one replica with every thread, on real speech."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.backends.ctranslate2 import batched as ct2_batched
from kvscribe.backends.ctranslate2.replicas import OneRowModel, Replicas, replicas
from kvscribe.chunking import ChunkRules, speech_chunks
from kvscribe.contract import DecodeRequest
from tests.conftest import EVAL_DIR

pytestmark = pytest.mark.model


@pytest.mark.parametrize(("rows", "workers"), [(8, 2), (3, 2), (1, 4), (11, 4), (2, 8), (5, 1)])
def test_shares_cover_every_row_once_and_near_evenly(rows, workers):
    shares = Replicas(None, None, workers).shares(rows)
    assert sorted(row for share in shares for row in share) == list(range(rows))
    assert all(share == sorted(share) for share in shares)
    assert len(shares) == min(workers, rows)
    sizes = [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 1


def test_long_rows_are_dealt_apart():
    """The French telephone recording's first batch (speech seconds per chunk): cut in
    order, one replica got 414 tokens to the other's 204 and decoded twice as long."""
    seconds = [29.8, 25.3, 28.3, 22.9, 10.6, 28.2, 12.6]
    shares = Replicas(None, None, 2).shares(len(seconds), seconds)
    loads = [sum(seconds[row] for row in share) for share in shares]
    assert max(loads) - min(loads) <= max(seconds)
    assert max(loads) < 0.55 * sum(seconds)


@pytest.fixture(scope="module")
def group(ct2_backend):
    """Four speech chunks of the long-form clip (each up to 30 s), their features and the
    backend's batch plan with two replicas beside its one-replica engine."""
    audio = load_audio(EVAL_DIR / "espeak_longform_en.wav")[: 100 * SAMPLE_RATE]
    chunks = speech_chunks(audio, ChunkRules(max_gap=None, cut_pauses=True))[:4]
    engine = ct2_backend.engine
    two = replicas(
        engine,
        str(ct2_backend.model.path),
        "cpu",
        engine.model.compute_type,
        threads=2,
        width=ct2_backend.dims.n_text_state,
    )
    plan, _ = ct2_batched.setup(engine, "en", DecodeRequest(), 5, 8, two)
    features = np.stack([ct2_batched.chunk_features(engine, audio, c) for c in chunks])
    return plan, chunks, features


def test_two_replicas_are_the_same_weights_as_threads_of_one(group):
    plan, _, _ = group
    assert plan.replicas.workers == 2 and plan.replicas.whole is plan.engine
    assert plan.replicas.engine.model is not plan.engine.model
    assert plan.replicas.split(2) and not plan.replicas.split(1)


@pytest.mark.slow
def test_replicas_encode_decode_and_align_as_one_engine_does(group):
    import ctranslate2

    plan, chunks, features = group
    # CTranslate2's own encoder, whichever one the backend chose to run (its model wraps
    # CTranslate2's where onnxruntime encodes: backends/ctranslate2/encoder.py)
    own = getattr(plan.engine.model, "ctranslate2_model", plan.engine.model)
    whole = np.asarray(own.encode(ctranslate2.StorageView.from_array(features)))
    shared = plan.replicas.map(
        lambda window: np.asarray(
            plan.replicas.engine.model.encode(ctranslate2.StorageView.from_array(window[None]))
        ),
        list(features),
    )
    np.testing.assert_allclose(np.concatenate(shared), whole, atol=1e-3)

    encoded = ctranslate2.StorageView.from_array(whole)
    one = ct2_batched._with_fallback(_alone(plan), encoded, chunks)
    split = ct2_batched._with_fallback(plan, encoded, chunks)
    assert [r.tokens for r in split] == [r.tokens for r in one]
    assert all(len(r.tokens) > 20 for r in one)  # real speech in every row
    assert [r.avg_logprob for r in split] == pytest.approx([r.avg_logprob for r in one], abs=1e-4)

    aligned_one = ct2_batched._aligned(_alone(plan), encoded, chunks, one)
    aligned_split = ct2_batched._aligned(plan, encoded, chunks, split)
    times = [[(w.start, w.end, w.word) for w in r.words] for r in aligned_split]
    assert times == [[(w.start, w.end, w.word) for w in r.words] for r in aligned_one]


def test_one_row_goes_to_a_replica_and_a_sampled_call_to_the_whole_engine(group):
    plan, _, _ = group
    two = plan.replicas
    assert two.one_row  # tiny.en: a decoder 384 wide
    assert two.decoder(1, sampled=False) is two.engine
    assert two.decoder(1, sampled=True) is plan.engine
    assert two.decoder(3, sampled=False) is plan.engine
    wide = dataclasses.replace(two, one_row=False)  # a decoder wider than measured
    assert wide.decoder(1, sampled=False) is plan.engine
    assert wide.one_row_engine is plan.engine


def test_faster_whispers_transcribe_calls_go_where_they_run_fastest(group):
    """Its beam search on a replica; its encoder and alignment on every thread, and a
    sampled retry on the whole engine (one seeded generator)."""
    plan, _, features = group
    two = plan.replicas
    calls: list[tuple[str, str]] = []
    whole, pool = (
        _Recorded(plan.engine.model, "whole", calls),
        _Recorded(two.engine.model, "replica", calls),
    )
    model = OneRowModel(whole, pool)
    encoded = model.encode(_window(features[0]))
    prompt = list(plan.prompt)
    found = model.generate(encoded, [prompt], beam_size=5, max_length=40)[0]
    model.generate(encoded, [prompt], beam_size=1, sampling_topk=0, sampling_temperature=0.4)
    model.align(encoded, plan.tokenizer.sot_sequence, found.sequences_ids, [1500])
    assert calls == [
        ("whole", "encode"),
        ("replica", "generate"),
        ("whole", "generate"),
        ("whole", "align"),
    ]
    assert model.is_multilingual is plan.engine.model.is_multilingual


@pytest.mark.slow
def test_a_row_transcribed_on_a_replica_is_the_same_as_on_every_thread(group, ct2_backend):
    plan, _, _ = group
    audio = load_audio(EVAL_DIR.parent / "clips_joined" / "joined_real.wav")[: 25 * SAMPLE_RATE]

    def transcript(engine) -> list[tuple]:
        segments, _ = engine.transcribe(audio, language="en", beam_size=5, word_timestamps=True)
        return [(s.text, [(w.start, w.end, w.word) for w in s.words]) for s in segments]

    on_replica = plan.replicas.one_row_engine
    assert isinstance(on_replica.model, OneRowModel)
    split = transcript(on_replica)
    assert split == transcript(plan.engine)
    assert sum(len(words) for _, words in split) > 40  # real speech, timed word by word


class _Recorded:
    """A real CTranslate2 model that notes which of its calls ran (a spy: it changes
    nothing)."""

    def __init__(self, model, name: str, calls: list):
        self._model, self._name, self._calls = model, name, calls

    def __getattr__(self, attribute: str):
        found = getattr(self._model, attribute)
        if not callable(found):
            return found

        def call(*args, **kwargs):
            self._calls.append((self._name, attribute))
            return found(*args, **kwargs)

        return call


def _window(mel: np.ndarray):
    import ctranslate2

    return ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None]))


def _alone(plan):
    """The plan with its engine alone: one replica, every thread."""
    return dataclasses.replace(plan, replicas=Replicas(plan.engine, plan.engine, 1))
