"""Temperature fallback and the other issue-14 request fields in the transformers backend,
on the real model and real audio: a window that loops at temperature 0 is rescued, the
rule's choices, reproducible sampling, conditioning, the report."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.contract import DecodeRequest
from kvscribe.decoding import Fallback
from kvscribe.stepped import fallback
from tests import loaded
from tests.conftest import EVAL_DIR, SAMPLE, SAMPLE_TEXT, wer

pytestmark = [pytest.mark.transformers, pytest.mark.eval]

LIBRIVOX = sorted(EVAL_DIR.glob("ps_librivox_*.wav"))
NO_FALLBACK = Fallback(temperatures=(0.0,))


@pytest.fixture(scope="module")
def backend():
    return loaded.backend("transformers", "cpu-laptop")


@pytest.fixture(scope="module")
def looping_audio() -> np.ndarray:
    """The librivox clips (24.7 s) under white noise at a quarter of their peak: tiny.en
    decodes it at temperature 0 into one phrase repeated to the end of the window."""
    speech = np.concatenate([load_audio(p) for p in LIBRIVOX])
    noise = np.random.default_rng(0).standard_normal(speech.size).astype(np.float32)
    return (speech + 0.25 * np.abs(speech).max() * noise).astype(np.float32)


def _decode(backend, audio, **request):
    run = backend.transcribe(audio, DecodeRequest(**request))
    return list(run.segments), run


def _most_repeated_phrase(text: str, words: int = 4) -> int:
    tokens = re.findall(r"[a-z']+", text.lower())
    grams = Counter(tuple(tokens[i : i + words]) for i in range(len(tokens) - words + 1))
    return max(grams.values(), default=0)


# -- a looping window rescued ---------------------------------------------------------------


@pytest.mark.slow
def test_a_window_that_loops_at_temperature_0_is_rescued_by_fallback(backend, looping_audio):
    # Its first 22 s loop too, in half the tokens (as do its heads of 21 s and more), and are
    # rescued as well; the batched test below needs the whole of it.
    head = looping_audio[: 22 * SAMPLE_RATE]
    looped, plain = _decode(backend, head, beam_size=1, batch_size=1, fallback=NO_FALLBACK)
    looped_text = "".join(s.text for s in looped)
    assert max(s.compression_ratio for s in looped) > 2.4, looped_text
    assert _most_repeated_phrase(looped_text) >= 5, looped_text
    assert plain.report.settings["fallback re-decodes"] == "0"

    # Three temperatures at best of 2 (not the default six at best of 5: 5x the time); the
    # window is rescued at 0.5 or 1.0 all the same.
    rescue = Fallback(temperatures=(0.0, 0.5, 1.0), best_of=2)
    rescued, run = _decode(backend, head, beam_size=1, batch_size=1, fallback=rescue)
    text = "".join(s.text for s in rescued)
    assert rescued, "the rescued window still says something"
    assert all(s.compression_ratio <= 2.4 for s in rescued), text
    assert all(s.temperature > 0 for s in rescued if s.seek == 0)
    assert _most_repeated_phrase(text) < 5, text
    redecoded = int(run.report.settings["fallback re-decodes"])
    assert redecoded >= 1
    # Every attempt's steps are counted: greedy and sampling feed one position per step.
    assert run.report.tokens == len(run.report.step_seconds)
    assert run.report.tokens > plain.report.tokens
    assert "0.0-1.0 step 0.5, best of 2" in run.report.settings["temperature fallback"]


def test_a_clean_clip_is_kept_at_temperature_0_with_its_scores(backend):
    segments, run = _decode(backend, load_audio(SAMPLE), batch_size=1)
    assert run.report.settings["fallback re-decodes"] == "0"
    assert wer(SAMPLE_TEXT, "".join(s.text for s in segments)) <= 0.1
    for segment in segments:
        assert segment.temperature == 0.0 and segment.seek == 0
        assert 0.5 < segment.compression_ratio < 2.4
    assert run.language == "en" and run.language_probability is None  # English-only model


def test_sampling_is_seeded_so_a_run_repeats_exactly(backend):
    audio = load_audio(SAMPLE)
    sampled = Fallback(temperatures=(1.0,))
    first, _ = _decode(backend, audio, batch_size=1, fallback=sampled)
    again, _ = _decode(backend, audio, batch_size=1, fallback=sampled)
    assert [s.tokens for s in first] == [s.tokens for s in again]
    assert all(s.temperature == 1.0 for s in first)
    assert wer(SAMPLE_TEXT, "".join(s.text for s in first)) <= 0.3  # best of 5 at T=1.0


# -- the rule's choices (real Attempt records, no decoding) ---------------------------------


def _attempt(temperature, ratio, logprob, no_speech=0.1):
    return fallback.Attempt([1, 2], logprob, no_speech, temperature, ratio)


def test_silence_is_final_before_the_quality_tests():
    rule = Fallback()
    silent_and_repetitive = _attempt(0.0, 5.0, -1.5, no_speech=0.9)
    assert rule.is_final(silent_and_repetitive)
    assert not rule.is_final(_attempt(0.0, 5.0, -0.2))
    assert not rule.is_final(_attempt(0.0, 1.5, -1.2))
    assert rule.is_final(_attempt(0.0, 1.5, -0.2))


def test_when_every_temperature_fails_the_likeliest_readable_attempt_is_kept():
    rule = Fallback()
    attempts = [
        _attempt(0.0, 6.0, -0.1),  # likeliest, but a loop
        _attempt(0.2, 1.8, -1.6),
        _attempt(0.4, 1.7, -1.3),  # kept: the likeliest under the compression threshold
        _attempt(1.0, 1.6, -2.5),
    ]
    assert rule.kept(attempts).temperature == 0.4
    loops = [_attempt(0.0, 6.0, -0.1), _attempt(0.2, 5.0, -0.3)]
    assert rule.kept(loops).temperature == 0.0  # none readable: likeliest
    assert fallback.resets_prompt(attempts)  # the last temperature tried was over 0.5
    assert not fallback.resets_prompt(attempts[:3])


def test_the_report_describes_the_rule_in_force():
    assert Fallback().describe() == (
        "0.0-1.0 step 0.2, best of 5, compression > 2.4, logprob < -1.0, no speech > 0.6"
    )
    assert NO_FALLBACK.describe().startswith("0.0 only (no retry), compression > 2.4")
    uneven = Fallback(temperatures=(0.0, 0.5, 0.6), logprob_threshold=None, best_of=2)
    assert uneven.describe() == "0.0 0.5 0.6, best of 2, compression > 2.4, no speech > 0.6"


# -- conditioning and the initial prompt -----------------------------------------------------


@pytest.mark.slow
def test_the_request_overrides_the_profiles_conditioning_and_the_prompt_opens_only(backend):
    """cpu-laptop conditions on previous text; a request that says no wins, and then the
    initial prompt reaches the first window only (openai-whisper's rule)."""
    chatty = "so um like we were uh talking about the thing you know"
    request = {"beam_size": 1, "batch_size": 1, "fallback": NO_FALLBACK}
    jfk = load_audio(SAMPLE)
    alone, _ = _decode(backend, jfk, prompt=chatty, **request)
    # cpu-laptop's own choice, said by the request: `alone` differs by its prompt only
    unprompted, run = _decode(backend, jfk, condition_on_previous_text=True, **request)
    assert run.report.settings["previous-text prompt"] == "on"
    assert [s.tokens for s in alone] != [s.tokens for s in unprompted]  # the prompt matters
    # A librivox clip (7.1 s) padded to one whole window, then the JFK sample as a second one:
    # what the first window says does not matter, only that the prompt opens it.
    speech = load_audio(LIBRIVOX[0])
    first = np.concatenate([speech, np.zeros(30 * SAMPLE_RATE - speech.size, np.float32)])
    audio = np.concatenate([first, jfk])
    prompted, run = _decode(
        backend, audio, prompt=chatty, condition_on_previous_text=False, **request
    )
    plain, _ = _decode(backend, audio, condition_on_previous_text=False, **request)
    assert run.report.settings["previous-text prompt"] == "off"
    second = [s.tokens for s in prompted if s.seek == 3000]
    assert second and second == [s.tokens for s in plain if s.seek == 3000]


# -- the batched path ------------------------------------------------------------------------


@pytest.mark.slow
def test_batched_chunks_fall_back_on_their_own(backend, looping_audio):
    """A clean clip and a noisy one decoded as one batch: only the noisy chunks are decoded
    again (their decode fails the logprob rule), and their segments keep the input's clock
    and carry the temperature of the attempt kept (when every attempt fails: the
    likeliest)."""
    clean = load_audio(SAMPLE)
    pause = np.zeros(3 * SAMPLE_RATE, dtype=np.float32)
    audio = np.concatenate([clean, pause, looping_audio])
    rule = Fallback(temperatures=(0.0, 0.5, 1.0), best_of=2)  # fewer rounds: the same test
    segments, run = _decode(backend, audio, beam_size=1, batch_size=8, fallback=rule)
    assert run.report.batch_size == 8
    first = [s for s in segments if s.end <= clean.size / SAMPLE_RATE + 0.5]
    rest = [s for s in segments if s not in first]
    assert first and rest
    assert all(s.temperature == 0.0 for s in first)
    assert wer(SAMPLE_TEXT, "".join(s.text for s in first)) <= 0.1
    assert all(s.compression_ratio <= 2.4 for s in segments)
    kept = {s.seek: s.temperature for s in rest}
    assert all(s.temperature == kept[s.seek] for s in rest)  # one attempt kept per chunk
    assert set(kept.values()) <= set(rule.temperatures)
    # at most 2 re-decodes (temperatures 0.5 and 1.0) of every window but the clean one
    retries = len(rule.temperatures) - 1
    redecoded = int(run.report.settings["fallback re-decodes"])
    assert 1 <= redecoded <= (run.report.windows - 1) * retries
    # on the input's clock: the noisy part's text starts after the pause (a chunk may
    # reach back into the clean clip's last words: pauses are cut out of chunks)
    noisy_start = (clean.size + pause.size) / SAMPLE_RATE
    assert min(s.start for s in rest) >= noisy_start - 1.0  # the VAD pads by < 1 s
    # Memory held, as the stats say it: the batch's two chunks' cross-attention K/V (kept
    # for their alignment) and the noisy chunk's again in its fallback round, one copy
    # each (cpu-laptop's shared store; tiny.en: K+V, 4 layers, 1500 frames, d 384, fp32).
    one_copy = 2 * 4 * 1500 * 384 * 4
    assert run.report.kv_cross_bytes >= 3 * one_copy


def test_the_silence_rule_comes_from_the_request(backend):
    noise = np.random.default_rng(1).standard_normal(10 * SAMPLE_RATE).astype(np.float32)
    quiet = 0.001 * noise
    kept, _ = _decode(backend, quiet, batch_size=1, fallback=NO_FALLBACK)
    assert kept == []  # openai-whisper's default: no speech, low logprob
    anything = dataclasses.replace(NO_FALLBACK, no_speech_threshold=None)
    said, _ = _decode(backend, quiet, batch_size=1, fallback=anything)
    assert said, "with no silence rule, the window's text is kept"
