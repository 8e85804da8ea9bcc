"""Decoder calls on single-thread CTranslate2 replicas (backends/ctranslate2/replicas.py): batched
rows shared out, and one row's calls, give the same encoder outputs, tokens and word times
as one replica with every thread, on real speech; that every-thread engine is loaded only
when a call needs it."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time

import numpy as np
import pytest

from kvscribe.adapters import faster_whisper as adapter
from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.backends.ctranslate2 import batched as ct2_batched
from kvscribe.backends.ctranslate2 import word_times
from kvscribe.backends.ctranslate2.group_encoding import EncodedRows, chunk_features
from kvscribe.backends.ctranslate2.replicas import OnDemand, OneRowModel, Replicas, load
from kvscribe.chunking import ChunkRules, speech_chunks
from kvscribe.contract import DecodeRequest
from kvscribe.decoding import Fallback
from kvscribe.pipeline import transcribe_speech
from tests import loaded
from tests.conftest import EVAL_DIR

JOINED_REAL = EVAL_DIR.parent / "clips_joined" / "joined_real.wav"
LONG_FORM = EVAL_DIR / "espeak_longform_en.wav"

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
def long_form():
    """The long-form clip's first 100 s."""
    return load_audio(LONG_FORM)[: 100 * SAMPLE_RATE]


@pytest.fixture(scope="module")
def group(ct2_backend, long_form):
    """Four speech chunks of the long-form clip (12-15 s each: what is compared is a row on
    either engine, and the batched 23-27 s rows decoded twice as long), their features and a
    batch plan on the backend's model loaded as two replicas (its every-thread engine on
    demand)."""
    chunks = speech_chunks(long_form, ChunkRules(max_seconds=15, max_gap=None, cut_pauses=True))[:4]
    two = load(
        str(ct2_backend.model.path),
        "cpu",
        ct2_backend.engine.model.compute_type,
        threads=2,
        width=ct2_backend.dims.n_text_state,
    )
    engine = two.engine
    plan, _ = ct2_batched.setup(engine, "en", DecodeRequest(), 5, 8, two)
    features = np.stack([chunk_features(engine, long_form, c) for c in chunks])
    return plan, chunks, features


def test_two_replicas_are_one_load_and_the_whole_engine_waits_for_a_call(group):
    plan, _, _ = group
    two = plan.replicas
    assert two.workers == 2 and two.engine is plan.engine
    assert two.engine.model.num_workers == 2  # one load, two single-thread replicas
    assert two.split(2) and not two.split(1)
    assert isinstance(two.on_demand, OnDemand) and two.whole.model.inner is two.on_demand
    # what the engine is, answered without loading it
    assert two.whole.model.compute_type == plan.engine.model.compute_type
    assert two.whole.model.is_multilingual is False
    assert not two.whole_started


def test_a_model_on_demand_loads_once_at_its_first_call(ct2_backend):
    import ctranslate2

    loads = []

    def loaded():
        loads.append(threading.current_thread().name)
        return ctranslate2.models.Whisper(str(ct2_backend.model.path), intra_threads=2)

    model = OnDemand(loaded, like=ct2_backend.engine.model)
    assert model.n_mels == 80 and not model.started and model.seconds is None
    found = []
    callers = [threading.Thread(target=lambda: found.append(model.num_workers)) for _ in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=60)
    assert found == [1, 1, 1, 1]  # the every-thread load: one worker
    assert len(loads) == 1 and model.started and model.seconds > 0


@pytest.mark.slow
def test_replicas_encode_decode_and_align_as_one_engine_does(group):
    import ctranslate2

    plan, chunks, features = group
    # CTranslate2's own encoder, whichever one the backend chose to run (its model wraps
    # CTranslate2's where onnxruntime encodes: backends/ctranslate2/encoder.py)
    own = plan.replicas.on_demand
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

    aligned_one = word_times.aligned(_alone(plan), encoded, chunks, one)
    aligned_split = word_times.aligned(plan, encoded, chunks, split)
    times = [[(w.start, w.end, w.word) for w in r.words] for r in aligned_split]
    assert times == [[(w.start, w.end, w.word) for w in r.words] for r in aligned_one]


def test_one_row_goes_to_a_replica_and_a_sampled_call_to_the_whole_engine(group):
    plan, _, _ = group
    two = plan.replicas
    assert two.one_row  # tiny.en: a decoder 384 wide
    assert two.decoder(1, sampled=False) is two.engine
    assert two.decoder(1, sampled=True) is two.whole
    assert two.decoder(3, sampled=False) is two.whole
    wide = dataclasses.replace(two, one_row=False)  # a decoder wider than measured
    assert wide.decoder(1, sampled=False) is two.whole
    assert wide.one_row_engine is two.whole


def test_faster_whispers_transcribe_calls_go_where_they_run_fastest(group):
    """Its beam search on a replica; its encoder and alignment on every thread, and a
    sampled retry on the whole engine (which decodes it on a load of its own)."""
    plan, _, features = group
    two = plan.replicas
    calls: list[tuple[str, str]] = []
    whole, pool = (
        _Recorded(two.whole.model, "whole", calls),
        _Recorded(two.engine.model, "replica", calls),
    )
    model = OneRowModel(whole, pool)
    encoded = model.encode(_window(features[0]))
    prompt = list(plan.prompt)
    found = model.generate(encoded, [prompt], beam_size=5, max_length=40)[0]
    model.generate(encoded, [prompt], beam_size=1, sampling_topk=0, sampling_temperature=0.4)
    model.align(encoded, plan.tokenizer.sot_sequence, found.sequences_ids, [1500])
    with pytest.raises(RuntimeError, match="multilingual"):  # tiny.en's reaches a replica
        model.detect_language(encoded)
    assert calls == [
        ("whole", "encode"),
        ("replica", "generate"),
        ("whole", "generate"),
        ("whole", "align"),
        ("replica", "detect_language"),
    ]
    assert model.is_multilingual is plan.engine.model.is_multilingual


@pytest.fixture(scope="module")
def uneven(group, long_form):
    """The clip's first three batched chunks (23-27 s of speech each) and 3 s of its second,
    encoded on a replica: dealt to two replicas as two and two, a 27 s row beside the 3 s one
    against two of 27 s and 23 s, so the first share decodes one row for most of its steps."""
    import ctranslate2

    plan, _, _ = group
    chunks = speech_chunks(long_form, ChunkRules(max_gap=None, cut_pauses=True))[:3]
    short = chunks[1].between(chunks[1].start, chunks[1].start + 3 * SAMPLE_RATE)
    mels = [chunk_features(plan.engine, long_form, chunk) for chunk in [*chunks, short]]
    model = plan.replicas.engine.model
    encoded = np.concatenate([np.asarray(model.encode(_window(mel))) for mel in mels])
    return [*chunks, short], ctranslate2.StorageView.from_array(encoded)


@pytest.mark.slow
def test_a_replica_aligns_rows_while_the_other_still_decodes(group, uneven):
    """Decoding and alignment side by side (batched._decoded_and_aligned): the replica whose
    share is short aligns rows while the other is still decoding, and the words and times
    are those of the two stages run one after the other."""
    plan, _, _ = group
    rows, encoded = uneven
    calls: list = []
    spans: list = []
    spied = dataclasses.replace(
        plan.replicas,
        engine=adapter.with_model(
            plan.replicas.engine, _Recorded(plan.replicas.engine.model, "replica", calls, spans)
        ),
    )
    side_by_side = dataclasses.replace(plan, replicas=spied)
    assert ct2_batched._overlapped(side_by_side, len(rows))
    found = ct2_batched._decoded_and_aligned(
        side_by_side, EncodedRows(encoded), rows, lambda _name: contextlib.nullcontext()
    )
    staged = word_times.aligned(
        plan, encoded, rows, ct2_batched._with_fallback(plan, encoded, rows)
    )
    assert [r.tokens for r in found] == [r.tokens for r in staged]
    times = [[(w.start, w.end, w.word) for w in r.words] for r in found]
    assert times == [[(w.start, w.end, w.word) for w in r.words] for r in staged]
    assert all(r.words for r in found)  # real speech in every row, each aligned
    generates = [end for call, _, end in spans if call == "generate"]
    aligns = [start for call, start, _ in spans if call == "align"]
    assert len(generates) == 2 and len(aligns) == len(rows)  # a call per share, per row
    assert min(aligns) < max(generates)  # an alignment began before the last decode ended


@pytest.mark.slow
def test_rows_the_fallback_decodes_again_are_aligned_after_their_last_attempt(group, uneven):
    """With decoding and alignment side by side, a row whose first attempt fails the
    fallback's test is decoded again (sampled, on the every-thread engine) and aligned
    once its kept attempt is known; a row the rule keeps at once is not decoded again."""
    plan, _, _ = group
    rows, encoded = uneven
    # every attempt fails the log-probability test, so every row is retried at 1.0 (one
    # sample: that the retry runs and is aligned is the claim, not the likeliest of five) ...
    picky = Fallback(temperatures=(0.0, 1.0), logprob_threshold=0.0, best_of=1)
    # ... but the short part is a stretch read again, which gets one attempt (per_row)
    rows = [*rows[:3], dataclasses.replace(rows[3], reread=True)]
    strict = dataclasses.replace(plan, fallback=picky)
    assert ct2_batched._overlapped(strict, len(rows))
    found = ct2_batched._decoded_and_aligned(
        strict, EncodedRows(encoded), rows, lambda _name: contextlib.nullcontext()
    )
    assert found[3].temperature == 0.0  # read again: its first attempt kept
    assert all(r.temperature in (0.0, 1.0) for r in found)
    for result in found:
        assert result.words, "every row with speech is aligned"
        text = "".join(w.word for w in result.words).strip()
        assert text == plan.tokenizer.decode(result.tokens).strip()


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
    assert split == transcript(plan.replicas.whole)
    assert sum(len(words) for _, words in split) > 40  # real speech, timed word by word


class _Recorded:
    """A real CTranslate2 model that notes which of its calls ran (a spy: it changes
    nothing); with `spans`, also when each ran: (call, start, end) on the perf_counter."""

    def __init__(self, model, name: str, calls: list, spans: list | None = None):
        self._model, self._name, self._calls, self._spans = model, name, calls, spans

    def __getattr__(self, attribute: str):
        found = getattr(self._model, attribute)
        if not callable(found):
            return found

        def call(*args, **kwargs):
            self._calls.append((self._name, attribute))
            started = time.perf_counter()
            try:
                return found(*args, **kwargs)
            finally:
                if self._spans is not None:
                    self._spans.append((attribute, started, time.perf_counter()))

        return call


def _window(mel: np.ndarray):
    import ctranslate2

    return ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None]))


def _alone(plan):
    """The plan on its every-thread engine alone: one replica, every thread."""
    whole = plan.replicas.whole
    return dataclasses.replace(plan, engine=whole, replicas=Replicas(whole, whole, 1))


def test_a_batched_run_of_real_speech_needs_one_load_of_the_model():
    """The joined real recordings (50 s, two chunks) decoded as the default decodes them
    with the onnxruntime encoder (set here: the timed choice can go either way on a loaded
    machine, and CTranslate2's encoder loads the every-thread engine with the model, tested
    below): every call runs on the replicas, so the every-thread engine is never loaded."""
    backend = loaded.ctranslate2_on_threads(2, encoder="onnxruntime")
    run = transcribe_speech(backend, load_audio(JOINED_REAL), DecodeRequest())
    text = " ".join(segment.text for segment in run.segments).lower()
    assert "ask not what your country can do for you" in " ".join(text.replace(".", " ").split())
    assert "2 replicas" in run.report.settings["engine threads"]
    assert "loaded again" not in run.report.settings["engine threads"]
    assert not backend._engines.whole_started


@pytest.mark.parametrize("threads, batch_size", [(2, None), (1, 1)])
def test_sampled_text_is_the_same_on_every_run_of_one_engine(threads, batch_size):
    """At temperature 1.0 every window is sampled. CTranslate2's generator per engine thread
    is seeded once, so on one engine the second run used to read other text than the first
    (all three differed, on both paths). Each sampled row on a load of its own reads the same
    every time, on the batched chunks over two replicas and on faster-whisper's one-row
    transcribe on one thread (a server lane's engine), and never loads the every-thread
    engine for it. Two runs: the second is the one that read other text, as it samples after
    the first has drawn from any generator the two share. One sample a row (best_of 1, not
    5): whether the draws repeat is the claim, not which of five is likeliest."""
    backend = loaded.ctranslate2_on_threads(threads, encoder="onnxruntime")
    sampled = Fallback(temperatures=(1.0,), best_of=1)
    request = DecodeRequest(fallback=sampled, batch_size=batch_size)
    audio = load_audio(JOINED_REAL)[: 25 * SAMPLE_RATE]
    first, second = (
        " ".join(s.text for s in transcribe_speech(backend, audio, request).segments)
        for _ in range(2)
    )
    assert first.strip() and second == first
    if threads > 1:
        assert not backend._engines.whole_started


def test_a_run_that_asks_for_word_times_starts_the_every_thread_load_up_front():
    """Live mode asks for word times at every decode, and a one-row path aligns them on the
    every-thread engine: its load starts when the run says what it will decode, not at the
    first utterance. A run without word times leaves it unloaded (with the onnxruntime
    encoder: CTranslate2's loads it with the model, below)."""
    backend = loaded.ctranslate2_on_threads(2, encoder="onnxruntime")
    backend.expect(DecodeRequest())
    assert not backend._engines.whole_started
    backend.expect(DecodeRequest(word_timestamps=True))
    assert backend._engines.whole_started
    audio = load_audio(JOINED_REAL)[: 11 * SAMPLE_RATE]
    run = transcribe_speech(backend, audio, DecodeRequest(word_timestamps=True))
    words = [word for segment in run.segments for word in segment.words]
    assert len(words) >= 10 and all(w.end >= w.start for w in words)
    assert "loaded again" not in run.report.settings["engine threads"]


def test_ctranslate2s_own_encoder_loads_the_every_thread_engine_with_the_model():
    """Where the profile (or the timed choice) runs CTranslate2's encoder, every window of a
    one-row path encodes on every thread: that engine's load starts with the model."""
    backend = loaded.ctranslate2_on_threads(2, encoder="ctranslate2")
    assert backend._engines.whole_started
    run = transcribe_speech(backend, load_audio(JOINED_REAL), DecodeRequest())
    assert "fellow americans" in " ".join(s.text for s in run.segments).lower()
    assert "loaded again" not in run.report.settings["engine threads"]


def test_a_second_load_that_fails_is_a_one_line_error_naming_the_fix(ct2_backend):
    """Out of memory cannot be caused here on demand: the load raises as CTranslate2 does."""
    from kvscribe.errors import BackendUnavailableError

    def out_of_memory():
        raise RuntimeError("std::bad_alloc")

    model = OnDemand(out_of_memory, like=ct2_backend.engine.model)
    with pytest.raises(BackendUnavailableError, match="second load") as failed:
        model.generate([], [])
    assert "--threads 1" in failed.value.hint
    assert model.compute_type == ct2_backend.engine.model.compute_type  # still answered
