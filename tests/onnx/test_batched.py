"""Batched speech chunks on the ONNX engine: the stepped core's batched driver
(kvscribe/stepped/batched.py), the one the transformers backend runs, against that
backend's torch decoder."""

from __future__ import annotations

import pytest

from kvscribe.audio import SAMPLE_RATE, load_audio
from tests.conftest import LONG_FORM_TWO_CHUNKS, wer
from tests.onnx.conftest import NEEDS, onnx_backend

for module, why in NEEDS.items():
    pytest.importorskip(module, reason=why)

pytestmark = [pytest.mark.onnx, pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def laptop(exported):
    """The onnx backend under cpu-laptop (float32 graphs), loaded once for the module's tests:
    they only transcribe with it, as a batch run does with one backend."""
    return onnx_backend(exported, "cpu-laptop")


def test_batched_chunks_on_the_engine_decode_torchs_tokens_holding_as_much(
    laptop, reference, long_form_head
):
    """The first three speech chunks of 61.5 s, beam 5, side by side: the ONNX engine and
    the transformers backend's torch decoder, each with its own front end, give the same
    tokens (float rounding may tip one near-tie of a beam search: at most one chunk differs,
    by a word or two), and their caches hold the same cross-attention bytes (the same
    policy over the same float32 shapes) and self-attention bytes within what a token or
    two more or fewer moves."""
    from kvscribe.chunking import BATCHED, speech_chunks
    from kvscribe.stepped.batched import decode_batch, full_prompt
    from kvscribe.stepped.longform import WindowStats

    audio = load_audio(long_form_head)
    chunks = speech_chunks(audio, BATCHED)[:3]
    assert len(chunks) == 3
    # cpu-laptop's policies; each built-in profile's are held to torch step by step in
    # test_engine.py, and tiny-vram's batch in the KV-budget test below.
    ours, theirs = laptop, reference[0]  # the transformers backend under cpu-laptop
    decoded, stats = {}, {}
    for name, backend in (("onnx", ours), ("torch", theirs)):
        plan = backend._plan("en", "transcribe", 5, timestamps=False)
        mels = [backend._chunk_mel(chunk.samples(audio)) for chunk in chunks]
        stats[name] = WindowStats()
        decoded[name] = decode_batch(plan, mels, full_prompt(plan, []), stats[name])
    pairs = list(zip(decoded["onnx"], decoded["torch"], strict=True))
    assert sum(mine.tokens == its.tokens for mine, its in pairs) >= 2
    for mine, its in pairs:
        text = ours.vocab.text
        assert wer(text(its.tokens), text(mine.tokens)) <= 0.05
        if mine.tokens == its.tokens:
            assert mine.avg_logprob == pytest.approx(its.avg_logprob, abs=1e-3)
    assert stats["onnx"].cross_bytes == stats["torch"].cross_bytes > 0
    assert stats["onnx"].self_peak_bytes == pytest.approx(stats["torch"].self_peak_bytes, rel=0.1)


def test_the_onnx_backend_batches_long_form_chunks(laptop, reference, long_form_head):
    """61.5 s at --batch-size 8: the speech chunks decode together (no previous text), the
    segments are in time order inside the audio, and the text is the transformers
    backend's batched text within a few words."""
    from kvscribe.contract import DecodeRequest

    audio = load_audio(long_form_head)
    request = DecodeRequest(batch_size=8)
    run = laptop.transcribe(audio, request)
    segments = list(run.segments)
    assert run.report.batch_size == 8 and run.report.windows >= 3
    assert run.report.settings["previous-text prompt"] == "off (batched)"
    starts = [s.start for s in segments]
    assert starts == sorted(starts) and starts[0] >= 0 and segments[-1].end <= 61.6
    text = " ".join(s.text for s in segments)
    reference_text = long_form_head.with_suffix(".txt").read_text(encoding="utf-8")
    assert wer(reference_text, text) <= 0.1
    torch_text = " ".join(s.text for s in reference[0].transcribe(audio, request).segments)
    assert wer(torch_text, text) <= 0.03


def test_a_kv_budget_picks_the_largest_batch_whose_measured_kv_fits(
    exported, laptop, long_form_head
):
    """tiny-vram's kv_budget_mb on the onnx backend: a chunk's KV bytes are measured on a
    probe (bytes_per_chunk) and the batch is the budget's share of them; the decode then
    holds no more than the budget."""
    from kvscribe.contract import DecodeRequest
    from kvscribe.stepped.batched import bytes_per_chunk

    backend = onnx_backend(exported, "tiny-vram", "int8")
    plan = backend._plan("en", "transcribe", 1, timestamps=False)
    per_chunk = bytes_per_chunk(plan, backend._silent_chunk())
    engine = backend.engine  # at least one chunk's Q8_0 cross copy: 34 bytes per 32 values
    cross_floats = 2 * engine.layers * engine.heads * engine.frames * engine.head_dim
    assert per_chunk > cross_floats * 34 // 32
    # cpu-laptop (a full self-attention cache, one float32 cross copy): exactly its cross
    # copy and its 5 beams' cache over the whole text context.
    full_plan = laptop._plan("en", "transcribe", 5, timestamps=False)
    self_bytes = 5 * full_plan.text_ctx * full_plan.kv_bytes_per_position
    assert bytes_per_chunk(full_plan, laptop._silent_chunk()) == cross_floats * 4 + self_bytes
    budget = backend.settings["kv_budget_mb"] * 1_000_000
    # Two chunks, decoded side by side: the budgeted batch is wider than three, so the
    # long-form head's third chunk only made the batch's decode longer, not fuller.
    audio = load_audio(long_form_head)[: int(LONG_FORM_TWO_CHUNKS[0] * SAMPLE_RATE)]
    run = backend.transcribe(audio, DecodeRequest())
    assert list(run.segments)
    assert run.report.windows == 2  # both chunks side by side
    expected = min(backend.settings["batch_size"], budget // per_chunk)
    assert run.report.batch_size == expected > 2
    assert "KV budget" in run.report.settings["batch size"]
    held = run.report.kv_self_peak_bytes + run.report.kv_cross_bytes
    assert 0 < held <= budget


def test_short_inputs_share_batches_and_read_as_they_do_alone(laptop):
    """Three short clips decoded side by side (transcribe_together, as a batch folder's
    parcel is): each reads as it does in a batch of its own, close to its reference, and
    the batch's timings are reported once."""
    from kvscribe.contract import DecodeRequest
    from tests.conftest import EVAL_DIR, SAMPLE

    clips = [SAMPLE, EVAL_DIR / "audioeval_kokoro_en_quick_brown_fox.wav"]
    clips.append(EVAL_DIR / "ps_librivox_ss01_0930.wav")
    audios = [load_audio(clip) for clip in clips]
    request = DecodeRequest(batch_size=8)
    together = laptop.transcribe_together(audios, request)
    for clip, audio, run in zip(clips, audios, together, strict=True):
        segments = [(s.start, s.end, s.text) for s in run.segments]
        [alone] = laptop.transcribe_together([audio], request)
        assert [(s.start, s.end, s.text) for s in alone.segments] == segments
        reference = clip.with_suffix(".txt").read_text(encoding="utf-8")
        assert wer(reference, " ".join(text for *_, text in segments)) <= 0.15, segments
        assert run.report.settings["batch size"].endswith("(short files share them)")
        assert run.report.tokens > 0 and run.report.windows >= 1
    assert together[0].report.encoder_seconds > 0
    assert [run.report.encoder_seconds for run in together[1:]] == [0.0, 0.0]
