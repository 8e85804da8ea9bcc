"""A live session in the test process, on the real embedded model and a replayed file: when
words are committed, measured on the stream's own clock (the samples it had received)."""

from __future__ import annotations

import numpy as np
import pytest

from kvscribe import audio
from kvscribe.live.session import LiveSession
from kvscribe.live.streaming import StreamSettings
from kvscribe.voice.silero import VadSettings
from tests.conftest import EVAL_DIR, SAMPLE, wer
from tests.live_replays import MAX_WER_GAP, SR, file_run, phrases, replay

# slow: each replay decodes its 7.5 s of audio several times over (3 s a test)
pytestmark = [pytest.mark.model, pytest.mark.slow]

REALFORM_EN = EVAL_DIR.parent / "realform" / "asterisk_en_ivr_dev.wav"


@pytest.fixture(scope="module")
def jfk_phrases() -> list[np.ndarray]:
    """JFK's phrases: "And so my fellow Americans", "ask not" and "what your country can do
    for you, ask what you can do for your country" (5 s)."""
    return phrases(audio.load_audio(SAMPLE))


@pytest.mark.parametrize("commit_silence", [0.3, 0.7])
def test_a_pause_commits_what_was_heard_before_the_utterance_ends(
    ct2_backend, tmp_path, jfk_phrases, commit_silence
):
    """JFK's last phrase, 0.45 s of silence, his first one: the pause is longer than the
    commit silence (0.3 s) and shorter than the silence that ends an utterance (0.7 s). The
    first phrase's last words are committed inside the pause, the utterance goes on into the
    second, and nothing is committed twice or lost. With the commit silence at the end's
    (0.7 s), they wait for the second phrase instead: the test can tell the two apart."""
    gap = 0.45
    opening, closing = jfk_phrases[0], jfk_phrases[-1]
    stream = np.concatenate([closing, np.zeros(int(gap * SR), dtype=np.float32), opening])
    vad = VadSettings(min_silence=0.7)  # re-decodes every 2 s: fewer decodes, the same commits
    settings = StreamSettings(step=2.0, commit_silence=commit_silence, vad=vad)
    events = replay(ct2_backend, tmp_path, stream, settings).events

    said = "What your country can do for you, ask what you can do for your country."
    commits = [(text, at) for kind, text, at in events if kind == "committed"]
    counts = np.cumsum([len(text.split()) for text, _ in commits])
    # where the first phrase's words (all but one, should the decoder merge two) are committed
    committed_at = commits[int(np.searchsorted(counts, len(said.split()) - 1))][1]
    first_end = closing.size / SR
    settled_in_the_pause = first_end <= committed_at <= first_end + gap
    assert settled_in_the_pause == (commit_silence < 0.45)
    ended = [at for kind, _, at in events if kind == "done"]
    assert not [at for at in ended if first_end < at <= first_end + gap]  # it did not end there
    committed = " ".join(text for text, _ in commits)
    # Whisper reads this stream's last phrase, cut out by the voice detector, differently on
    # different CPUs' kernels ("so am I fellow America" on oneDNN's int8, in a file run too):
    # live mode may not read it worse than a file run of the same stream does.
    truth = f"{said} And so my fellow Americans"
    offline = file_run(ct2_backend, tmp_path)
    assert wer(truth, committed) <= wer(truth, offline) + MAX_WER_GAP, committed


def test_the_decode_at_a_pause_is_the_last_until_speech_resumes(
    ct2_backend, tmp_path, jfk_phrases, monkeypatch
):
    """JFK's first phrase (1.9 s, short enough to wait 1.2 s of quiet for its end) and 2 s of
    silence: the decode when speech pauses is the utterance's last one, and its end commits
    it. Re-decoding every second of the silence would add a decode that the end waits for."""
    lead = 0.5
    phrase = jfk_phrases[0]
    silence = np.zeros(2 * SR, dtype=np.float32)
    stream = np.concatenate([silence[: int(lead * SR)], phrase, silence])
    engine = ct2_backend
    decode = engine.transcribe
    buffers: list[float] = []  # the seconds of audio each decode was given

    def counted(samples, request):
        buffers.append(samples.size / SR)
        return decode(samples, request)

    monkeypatch.setattr(engine, "transcribe", counted)
    # Unsure last words committed at once: alone, this phrase's are (the hold has tests below).
    settings = StreamSettings(step=1.0, hold_unsure=0.0)
    recorder = replay(ct2_backend, tmp_path, stream, settings)
    assert [kind for kind, _, _ in recorder.events] == ["committed", "done"], recorder.events
    assert "fellow" in recorder.events[0][1]  # alone, the phrase reads "And so am I fellow ..."
    # The last decode is the one at the pause: its buffer holds the 0.2 s pad before the
    # phrase, the phrase and 0.1 s after the voice detector heard it pause. One a second into
    # the silence would hold a second more.
    assert max(buffers) < phrase.size / SR + 0.8, buffers


@pytest.mark.parametrize("heard", [0.05, 0.25])
def test_the_decode_at_a_pause_holds_the_quiet_the_settings_ask_for(
    ct2_backend, tmp_path, jfk_phrases, monkeypatch, heard
):
    """JFK's first phrase and 2 s of silence: the decode at the pause starts once `pause_heard`
    of the pause has arrived, so its buffer ends that far past the voice detector's pause,
    plus at most the rest of the 0.1 s chunk the audio came in."""
    silence = np.zeros(2 * SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[0], silence])
    decode = LiveSession._decode
    past_the_pause: list[float] = []  # seconds of each decode's buffer after a pause

    def recorded(session, start, stop, *speech_end):
        paused = session._utterance.paused_at if session._utterance else None
        if paused is not None:
            past_the_pause.append((stop - paused) / SR)
        return decode(session, start, stop, *speech_end)

    monkeypatch.setattr(LiveSession, "_decode", recorded)
    recorder = replay(ct2_backend, tmp_path, stream, StreamSettings(step=1.0, pause_heard=heard))
    assert "fellow" in " ".join(text for _, text, _ in recorder.events)
    assert past_the_pause, "no decode at the pause"
    assert all(heard <= seconds < heard + 0.1 for seconds in past_the_pause), past_the_pause


@pytest.mark.parametrize(("phrase", "at_pause"), [(0, 0), (-1, 1)])
def test_stats_tell_commits_at_a_pause_from_commits_at_the_end(
    ct2_backend, tmp_path, jfk_phrases, phrase, at_pause
):
    """An utterance long enough to read alone (JFK's last phrase, 5 s) is committed at the
    pause and counts there; a short one (his first, 1.9 s) waits for its end."""
    silence = np.zeros(2 * SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[phrase], silence])
    stats = replay(ct2_backend, tmp_path, stream, StreamSettings(step=2.0)).stats
    assert stats.utterances == 1
    assert len(stats.at_pause) == at_pause
    assert stats.to_dict()["utterances_at_pause"] == at_pause


@pytest.mark.parametrize("given", [None, 5])
def test_a_decode_may_not_run_on_far_past_what_its_buffer_can_hold(
    ct2_backend, tmp_path, jfk_phrases, monkeypatch, given
):
    """Each decode's tokens are bounded by its buffer's length (12 a second, and 16), so a
    decoder caught repeating itself stops long before Whisper's 224 tokens; JFK's words
    are all there under the bound. A smaller --max-new-tokens still wins. No decode reads
    skipped speech again inside itself: the next decode of the buffer does."""
    engine = ct2_backend
    decode = engine.transcribe
    asked: list[tuple[float, int | None]] = []  # (buffer seconds, max_new_tokens) per decode
    rereads: list[bool] = []

    def spied(samples, request):
        asked.append((samples.size / SR, request.max_new_tokens))
        rereads.append(request.reread_stretched)
        return decode(samples, request)

    monkeypatch.setattr(engine, "transcribe", spied)
    silence = np.zeros(SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[-1], silence])
    recorder = replay(ct2_backend, tmp_path, stream, StreamSettings(step=2.0), max_new_tokens=given)
    expected = [given or int(seconds * 12) + 16 for seconds, _ in asked]
    assert asked and [bound for _, bound in asked] == expected, asked
    assert not any(rereads)
    committed = " ".join(text for kind, text, _ in recorder.events if kind == "committed")
    said = "What your country can do for you, ask what you can do for your country."
    assert (wer(said, committed) <= 0.1) == (given is None)


@pytest.mark.parametrize("context", [0.0, 8.0])
def test_a_new_utterance_is_decoded_with_the_one_before_it(
    ct2_backend, tmp_path, jfk_phrases, monkeypatch, context
):
    """JFK's last phrase (5 s), 1 s of silence (it ends), his first phrase (1.9 s). With
    context, the second utterance's decodes hear the first one in front of it, read it
    right, and commit only its own words: nothing of the first is committed twice; being
    long enough to read, it is committed at its pause. With none, they hear the phrase
    alone, and it waits for its end as a short utterance does."""
    engine = ct2_backend
    decode = engine.transcribe
    buffers: list[float] = []  # seconds of audio per decode

    def counted(samples, request):
        buffers.append(samples.size / SR)
        return decode(samples, request)

    monkeypatch.setattr(engine, "transcribe", counted)
    first, second = jfk_phrases[-1], jfk_phrases[0]
    silence = np.zeros(SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], first, silence, second, silence])
    # Unsure last words committed at once: the second utterance's own decodes, not its
    # continuing the first's (below), are what this test reads.
    settings = StreamSettings(step=2.0, context=context, hold_unsure=0.0)
    recorder = replay(ct2_backend, tmp_path, stream, settings)

    done = [text for kind, text, _ in recorder.events if kind == "done"]
    assert len(done) == 2, recorder.events
    said = "What your country can do for you, ask what you can do for your country."
    assert wer(said, done[0]) <= 0.1
    if context:  # alone, this phrase reads "And so am I fellow American."
        assert wer("And so my fellow Americans", done[1]) <= 0.2, done[1]
    assert "country" not in done[1]  # the first utterance's words are not committed again
    # Read with its context, the short phrase is committed at its pause; alone, it waits.
    assert len(recorder.stats.at_pause) == (2 if context else 1)
    # the last decode is the second utterance's: with context, it holds both phrases
    both = (first.size + silence.size + second.size) / SR
    assert (buffers[-1] >= both) == (context > 0), buffers


@pytest.mark.parametrize(("trim_after", "alone_after"), [(8.0, 30.0), (18.0, 1.5)])
def test_the_context_is_cut_off_first_when_the_buffer_grows_long(
    ct2_backend, tmp_path, jfk_phrases, monkeypatch, trim_after, alone_after
):
    """JFK's last phrase twice, 1 s of silence between: the second utterance starts with the
    first as context. The context is what is cut off once the buffer passes `trim_after`,
    or once the utterance's own audio passes `alone_after` (it reads well alone by then),
    whichever comes first. The second phrase's words are all committed, once."""
    engine = ct2_backend
    decode = engine.transcribe
    buffers: list[float] = []

    def counted(samples, request):
        buffers.append(samples.size / SR)
        return decode(samples, request)

    monkeypatch.setattr(engine, "transcribe", counted)
    phrase, silence = jfk_phrases[-1], np.zeros(SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], phrase, silence, phrase, silence])
    settings = StreamSettings(step=2.0, trim_after=trim_after, alone_after=alone_after)
    recorder = replay(ct2_backend, tmp_path, stream, settings)
    done = [text for kind, text, _ in recorder.events if kind == "done"]
    said = "What your country can do for you, ask what you can do for your country."
    assert len(done) == 2 and all(wer(said, text) <= 0.1 for text in done), done
    assert max(buffers) < 9.0, buffers  # the context went before the buffer reached 9 s
    assert buffers[-1] < phrase.size / SR + 1.0, buffers  # the last decode: the phrase alone


def test_a_long_utterance_cut_just_before_a_pause_is_still_committed_at_it(
    ct2_backend, tmp_path, jfk_phrases
):
    """JFK's last phrase, a 0.45 s pause (not an end), his first phrase: the buffer passes
    `trim_after` (7 s) during the second phrase and is cut after "country.", leaving 2 s
    before the pause. The utterance is 7.5 s long, so that pause commits it, as it would
    had the buffer not been cut."""
    gap = np.zeros(int(0.45 * SR), dtype=np.float32)
    silence = np.zeros(2 * SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[-1], gap, jfk_phrases[0], silence])
    settings = StreamSettings(step=1.0, trim_after=7.0, hold_unsure=0.0)  # all at the pause
    stats = replay(ct2_backend, tmp_path, stream, settings).stats
    assert stats.utterances == 1
    assert len(stats.at_pause) == 1


@pytest.mark.eval
def test_speech_after_the_words_a_decode_stops_at_is_read_on(ct2_backend, tmp_path):
    """The realform English recording's 108-118.4 s: "Simultaneous call limit reached.", then,
    after a 1.2 s pause, "To increase the audio volume from other participants." and 1.3 s of
    quiet (it ends). Read with the utterance before it as context, Whisper (tiny.en,
    CTranslate2's oneDNN path) ends the decode at the pause with a lone timestamp after
    "other" and never reads "participants", which the voice detector heard and a file run
    reads. Live mode reads the rest again."""
    samples = audio.load_audio(REALFORM_EN)[108 * SR : int(118.4 * SR)]
    # Re-decoding every 2 s: the decode at the pause, the one that stops at "other", holds
    # the same buffer as at the default 1 s (the speech after 118.4 s adds only decodes).
    # The utterance that ends at 118.4 s alone (its unsure last words committed at once): with
    # the speech before it continuing, the buffer is another.
    settings = StreamSettings(step=2.0, hold_unsure=0.0)
    recorder = replay(ct2_backend, tmp_path, samples, settings)
    commits = [text for kind, text, _ in recorder.events if kind == "committed"]
    words = [w.strip(".,").lower() for w in " ".join(commits).split()]
    phrase = ["to", "increase", "the", "audio", "volume", "from", "other", "participants"]
    found = [i for i in range(len(words)) if words[i : i + len(phrase)] == phrase]
    assert found, commits
