"""Batched rows shared out over single-thread CTranslate2 replicas
(backends/ct2_replicas.py): the same encoder outputs, tokens and word times as one replica
with every thread, on real chunks of the long-form clip."""

from __future__ import annotations

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.backends import ct2_batched
from kvscribe.backends.base import DecodeRequest
from kvscribe.backends.ct2_replicas import Replicas, replicas
from kvscribe.chunking import ChunkRules, speech_chunks
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
    two = replicas(engine, str(ct2_backend.model.path), "cpu", engine.model.compute_type, threads=2)
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
    whole = np.asarray(plan.engine.model.encode(ctranslate2.StorageView.from_array(features)))
    shared = plan.replicas.map(
        lambda window: np.asarray(
            plan.replicas.engine.model.encode(ctranslate2.StorageView.from_array(window[None]))
        ),
        list(features),
    )
    np.testing.assert_allclose(np.concatenate(shared), whole, atol=1e-3)

    encoded = ctranslate2.StorageView.from_array(whole)
    seconds = [chunk.seconds for chunk in chunks]
    one = ct2_batched._with_fallback(_alone(plan), encoded, seconds)
    split = ct2_batched._with_fallback(plan, encoded, seconds)
    assert [r.tokens for r in split] == [r.tokens for r in one]
    assert all(len(r.tokens) > 20 for r in one)  # real speech in every row
    assert [r.avg_logprob for r in split] == pytest.approx([r.avg_logprob for r in one], abs=1e-4)

    aligned_one = ct2_batched._aligned(_alone(plan), encoded, chunks, one)
    aligned_split = ct2_batched._aligned(plan, encoded, chunks, split)
    times = [[(w.start, w.end, w.word) for w in r.words] for r in aligned_split]
    assert times == [[(w.start, w.end, w.word) for w in r.words] for r in aligned_one]


def _alone(plan):
    """The plan with its engine alone: one replica, every thread."""
    import dataclasses

    return dataclasses.replace(plan, replicas=Replicas(plan.engine, plan.engine, 1))
