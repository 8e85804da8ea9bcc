"""Live mode's hold of an utterance's unsure last words (docs/live.md, "Unsure last words"),
in the test process on the real embedded model and replayed JFK phrases: what speech within
the hold, none, and a blip the voice detector discards do to what is committed, on the
stream's own clock."""

from __future__ import annotations

import numpy as np
import pytest

from kvscribe import audio
from kvscribe.live.session import LiveSession
from kvscribe.live.streaming import StreamSettings
from tests.conftest import SAMPLE, wer
from tests.live_replays import MAX_WER_GAP, SR, phrases, replay

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def jfk_phrases() -> list[np.ndarray]:
    """JFK's phrases: "And so my fellow Americans", "ask not" and "what your country can do
    for you, ask what you can do for your country" (5 s)."""
    return phrases(audio.load_audio(SAMPLE))


@pytest.fixture
def every_last_word_unsure(monkeypatch):
    """Every word in a reading's last second counts as unsure: the hold then comes at every
    utterance end, whatever a CPU's kernels make of the words' probabilities."""
    from kvscribe.live import agreement

    monkeypatch.setattr(agreement, "UNSURE_PROBABILITY", 1.01)


def test_unsure_last_words_are_read_again_with_the_speech_that_follows(
    ct2_backend, tmp_path, jfk_phrases, every_last_word_unsure
):
    """JFK's first phrase (1.9 s: it ends after 1.2 s of quiet), 1.6 s of silence, his last
    phrase: the first utterance ends with its last words held, the second phrase comes
    within the 2 s they wait, and the utterance goes on into it: one utterance, every word
    committed once. Without the hold, two utterances, read no better (within a word: how
    Whisper reads "so my fellow" hangs on the CPU's kernels, in a file run too, and the
    first phrase read alone reads "so am I fellow" on some of them)."""
    gap = np.zeros(int(1.6 * SR), dtype=np.float32)
    silence = np.zeros(SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[0], gap, jfk_phrases[-1], silence])
    held = replay(ct2_backend, tmp_path, stream, StreamSettings(step=2.0))
    # both ends held (every last word is unsure here): the second's, released at the end of
    # the audio, was not resumed
    assert (held.stats.held_back, held.stats.held_resumed) == (2, 1)
    done = [text for kind, text, _ in held.events if kind == "done"]
    assert len(done) == 1, held.events
    committed = " ".join(text for kind, text, _ in held.events if kind == "committed")
    assert committed == done[0]  # each word committed once
    truth = "And so my fellow Americans what your country can do for you ask what you can do"
    truth += " for your country"
    alone = replay(ct2_backend, tmp_path, stream, StreamSettings(step=2.0, hold_unsure=0.0))
    ended = [text for kind, text, _ in alone.events if kind == "done"]
    assert len(ended) == 2, alone.events
    assert wer(truth, committed) <= wer(truth, " ".join(ended)) + MAX_WER_GAP, committed


def test_unsure_last_words_no_speech_follows_are_committed_as_read(
    ct2_backend, tmp_path, jfk_phrases, every_last_word_unsure
):
    """JFK's first phrase and 3 s of silence: its last words wait `hold_unsure` (2 s) after
    the speech stopped, then are committed as they were read: the same text as with no hold,
    committed that much later on the stream's clock."""
    silence = np.zeros(3 * SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[0], silence])
    speech_end = 0.5 + jfk_phrases[0].size / SR
    held = replay(ct2_backend, tmp_path, stream, StreamSettings(step=1.0))
    at_once = replay(ct2_backend, tmp_path, stream, StreamSettings(step=1.0, hold_unsure=0.0))
    assert (held.stats.held_back, held.stats.held_resumed) == (1, 0)
    (held_done,) = [(text, at) for kind, text, at in held.events if kind == "done"]
    (done,) = [(text, at) for kind, text, at in at_once.events if kind == "done"]
    assert held_done[0] == done[0] and "fellow" in done[0]
    # The end comes after 1.2 s of quiet (a short utterance), the release 2 s after the
    # speech stopped: each on the 0.1 s chunk that carries it past, the voice detector's
    # end of speech within a 32 ms window of the phrase's.
    assert done[1] < speech_end + 1.5, done
    assert speech_end + 1.9 <= held_done[1] < speech_end + 2.2, held_done


def test_a_blip_after_a_held_end_leaves_it_held_and_paused(
    ct2_backend, tmp_path, jfk_phrases, monkeypatch, every_last_word_unsure
):
    """JFK's first phrase, 1.4 s of silence, 0.2 s of his speech (the voice detector starts
    an utterance there and, 1.2 s later, discards it as too short) and 3 s of silence: the
    held utterance is resumed by the blip and decoded with it, commits nothing of that
    decode, and is held again as it was when the blip is discarded: its words committed
    once, as without the blip, when the hold runs out."""
    blip = jfk_phrases[-1][SR : int(1.2 * SR)]
    gap, silence = np.zeros(int(1.4 * SR), np.float32), np.zeros(3 * SR, np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[0], gap, blip, silence])
    blip_end = (SR // 2 + jfk_phrases[0].size + gap.size + blip.size) / SR
    decode = LiveSession._decode
    stops: list[float] = []  # where each decode's buffer ends, in stream seconds

    def recorded(session, start, stop, *speech_end):
        stops.append(stop / SR)
        return decode(session, start, stop, *speech_end)

    monkeypatch.setattr(LiveSession, "_decode", recorded)
    settings = StreamSettings(step=1.0, hold_unsure=4.0)
    recorder = replay(ct2_backend, tmp_path, stream, settings)
    assert (recorder.stats.held_back, recorder.stats.held_resumed) == (1, 0)
    done = [(text, at) for kind, text, at in recorder.events if kind == "done"]
    assert len(done) == 1 and "fellow" in done[0][0], recorder.events
    assert max(stops) > blip_end, stops  # the blip was decoded, at its pause
    speech_end = 0.5 + jfk_phrases[0].size / SR
    assert speech_end + 3.9 <= done[0][1] < speech_end + 4.2, done
    quiet = np.concatenate([silence[: SR // 2], jfk_phrases[0], gap, blip * 0, silence])
    without = replay(ct2_backend, tmp_path, quiet, settings)
    assert [e for e in without.events if e[0] == "done"] == [("done", *done[0])]


def test_a_blip_long_after_a_held_end_commits_nothing_twice(
    ct2_backend, tmp_path, jfk_phrases, every_last_word_unsure
):
    """JFK's last phrase (5 s: read with its words' agreement, not as a short one), 2.2 s
    of silence, a 0.2 s blip the voice detector discards, 3 s of silence, the words held for
    4 s: the decode at the blip's pause hears the held words 2 s before its end, which
    would commit them, but the blip may yet be discarded, so nothing is committed then. The
    utterance's text is the same as the stream's without the blip."""
    blip = jfk_phrases[-1][int(1.2 * SR) : int(1.48 * SR)]  # starts an utterance, then discarded
    gap, silence = np.zeros(int(2.2 * SR), np.float32), np.zeros(3 * SR, np.float32)
    settings = StreamSettings(step=1.0, hold_unsure=4.0)
    parts = [silence[: SR // 2], jfk_phrases[-1], gap, blip, silence]
    recorder = replay(ct2_backend, tmp_path, np.concatenate(parts), settings)
    assert recorder.stats.held_back == 1 and recorder.stats.held_resumed == 0
    parts[3] = blip * 0
    without = replay(ct2_backend, tmp_path, np.concatenate(parts), settings)
    done = [text for kind, text, _ in recorder.events if kind == "done"]
    assert done == [text for kind, text, _ in without.events if kind == "done"], recorder.events
    committed = " ".join(text for kind, text, _ in recorder.events if kind == "committed")
    assert committed == done[0]  # each word once
