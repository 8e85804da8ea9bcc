"""A live session in the test process, on the real embedded model and a replayed file: when
words are committed, measured on the stream's own clock (the samples it had received)."""

from __future__ import annotations

import wave

import numpy as np
import pytest

from kvscribe import audio
from kvscribe.contract import DecodeRequest
from kvscribe.live.capture import Capture, FileReplay
from kvscribe.live.session import LiveSession
from kvscribe.live.stats import LiveStats
from kvscribe.live.streaming import StreamSettings
from kvscribe.options import LiveOptions
from kvscribe.runner import decode_request
from kvscribe.voice.silero import WINDOW, SileroVad, VadSettings, VoiceDetector
from tests.conftest import EVAL_DIR, SAMPLE, wer

# slow: each replay decodes its 7.5 s of audio several times over (3 s a test)
pytestmark = [pytest.mark.model, pytest.mark.slow]

SR = audio.SAMPLE_RATE
MAX_WER_GAP = 0.05  # one word of the 20 in JFK's phrases
REALFORM_EN = EVAL_DIR.parent / "realform" / "asterisk_en_ivr_dev.wav"
STREAM = "stream.wav"  # the file a replay writes in its test's tmp_path


class Recorder:
    """Every commit and utterance end, with the seconds of audio the session had received."""

    def __init__(self, stats: LiveStats) -> None:
        self.stats = stats
        self.events: list[tuple[str, str, float]] = []

    def _at(self) -> float:
        return self.stats.audio_seconds

    def committed(self, text: str) -> None:
        self.events.append(("committed", text, self._at()))

    def tentative(self, text: str) -> None:
        pass

    def utterance_done(self, text: str, latency: float) -> None:
        self.events.append(("done", text, self._at()))

    def heard(self, level_db: float, speaking: bool) -> None:
        pass


def _phrases(samples: np.ndarray) -> list[np.ndarray]:
    """The speech of `samples` split at the pauses long enough to end an utterance (VAD
    windows under the speech threshold for 0.7 s or more)."""
    speech = np.flatnonzero(SileroVad().probabilities(samples) >= VadSettings().threshold)
    breaks = np.flatnonzero(np.diff(speech) * WINDOW >= 0.7 * SR)
    firsts, lasts = speech[np.r_[0, breaks + 1]], speech[np.r_[breaks, speech.size - 1]]
    return [samples[a * WINDOW : (b + 1) * WINDOW] for a, b in zip(firsts, lasts, strict=True)]


def _written(tmp_path, samples: np.ndarray):
    """`samples` as the 16-bit WAV file a session replays."""
    path = tmp_path / STREAM
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SR)
        out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def _replay(
    backend, tmp_path, samples: np.ndarray, settings: StreamSettings, **options
) -> Recorder:
    """`samples` replayed live through `backend`: the suite's ct2_backend (tests/conftest.py),
    whose encoder remembers the windows it has encoded (tests/loaded.py). Replays encode the
    same buffers again (a parametrized test's other setting, the same stream in another
    test, a file run of it): about half of this module's encodes."""
    path = _written(tmp_path, samples)
    live_options = LiveOptions(source=str(path), paced=False, **options)
    stats = LiveStats("ctranslate2", "cpu-laptop", "tiny.en", str(path), paced=False)
    recorder = Recorder(stats)
    session = LiveSession(
        backend,
        decode_request(live_options),
        Capture(FileReplay(path, paced=False)),
        VoiceDetector(SileroVad(), settings.vad),
        recorder,
        stats,
        settings,
    )
    session.run()
    return recorder


def _offline(backend, tmp_path) -> str:
    """The stream the session replayed, transcribed as a file run would, by the same backend:
    its 16-bit samples, not the float ones it was made of (whose reading differs on some
    kernels: "so my fellow" from the float samples, "so am I fellow" from the file's on
    MKL with AVX-512 on an AMD EPYC with AVX-512 VNNI)."""
    samples = audio.load_audio(tmp_path / STREAM)
    run = backend.transcribe(samples, DecodeRequest())
    return "".join(segment.text for segment in run.segments)


@pytest.fixture(scope="module")
def jfk_phrases() -> list[np.ndarray]:
    """JFK's phrases: "And so my fellow Americans", "ask not" and "what your country can do
    for you, ask what you can do for your country" (5 s)."""
    return _phrases(audio.load_audio(SAMPLE))


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
    events = _replay(ct2_backend, tmp_path, stream, settings).events

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
    offline = _offline(ct2_backend, tmp_path)
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
    recorder = _replay(ct2_backend, tmp_path, stream, settings)
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
    recorder = _replay(ct2_backend, tmp_path, stream, StreamSettings(step=1.0, pause_heard=heard))
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
    stats = _replay(ct2_backend, tmp_path, stream, StreamSettings(step=2.0)).stats
    assert stats.utterances == 1
    assert len(stats.at_pause) == at_pause
    assert stats.to_dict()["utterances_at_pause"] == at_pause


@pytest.mark.parametrize("given", [None, 5])
def test_a_decode_may_not_run_on_far_past_what_its_buffer_can_hold(
    ct2_backend, tmp_path, jfk_phrases, monkeypatch, given
):
    """Each decode's tokens are bounded by its buffer's length (12 a second, and 16), so a
    decoder caught repeating itself stops long before Whisper's 224 tokens; JFK's words
    are all there under the bound. A smaller --max-new-tokens still wins."""
    engine = ct2_backend
    decode = engine.transcribe
    asked: list[tuple[float, int | None]] = []  # (buffer seconds, max_new_tokens) per decode

    def spied(samples, request):
        asked.append((samples.size / SR, request.max_new_tokens))
        return decode(samples, request)

    monkeypatch.setattr(engine, "transcribe", spied)
    silence = np.zeros(SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[-1], silence])
    recorder = _replay(
        ct2_backend, tmp_path, stream, StreamSettings(step=2.0), max_new_tokens=given
    )
    expected = [given or int(seconds * 12) + 16 for seconds, _ in asked]
    assert asked and [bound for _, bound in asked] == expected, asked
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
    recorder = _replay(ct2_backend, tmp_path, stream, settings)

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
    committed once, read no worse than a file run reads the stream. Without the hold, two
    utterances."""
    gap = np.zeros(int(1.6 * SR), dtype=np.float32)
    silence = np.zeros(SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[0], gap, jfk_phrases[-1], silence])
    held = _replay(ct2_backend, tmp_path, stream, StreamSettings(step=2.0))
    # both ends held (every last word is unsure here): the second's, released at the end of
    # the audio, was not resumed
    assert (held.stats.held_back, held.stats.held_resumed) == (2, 1)
    done = [text for kind, text, _ in held.events if kind == "done"]
    assert len(done) == 1, held.events
    committed = " ".join(text for kind, text, _ in held.events if kind == "committed")
    assert committed == done[0]  # each word committed once
    truth = "And so my fellow Americans what your country can do for you ask what you can do"
    truth += " for your country"
    offline = _offline(ct2_backend, tmp_path)
    assert wer(truth, committed) <= wer(truth, offline) + MAX_WER_GAP, committed
    alone = _replay(ct2_backend, tmp_path, stream, StreamSettings(step=2.0, hold_unsure=0.0))
    assert [kind for kind, _, _ in alone.events].count("done") == 2, alone.events


def test_unsure_last_words_no_speech_follows_are_committed_as_read(
    ct2_backend, tmp_path, jfk_phrases, every_last_word_unsure
):
    """JFK's first phrase and 3 s of silence: its last words wait `hold_unsure` (2 s) after
    the speech stopped, then are committed as they were read: the same text as with no hold,
    committed that much later on the stream's clock."""
    silence = np.zeros(3 * SR, dtype=np.float32)
    stream = np.concatenate([silence[: SR // 2], jfk_phrases[0], silence])
    speech_end = 0.5 + jfk_phrases[0].size / SR
    held = _replay(ct2_backend, tmp_path, stream, StreamSettings(step=1.0))
    at_once = _replay(ct2_backend, tmp_path, stream, StreamSettings(step=1.0, hold_unsure=0.0))
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
    recorder = _replay(ct2_backend, tmp_path, stream, settings)
    assert (recorder.stats.held_back, recorder.stats.held_resumed) == (1, 0)
    done = [(text, at) for kind, text, at in recorder.events if kind == "done"]
    assert len(done) == 1 and "fellow" in done[0][0], recorder.events
    assert max(stops) > blip_end, stops  # the blip was decoded, at its pause
    speech_end = 0.5 + jfk_phrases[0].size / SR
    assert speech_end + 3.9 <= done[0][1] < speech_end + 4.2, done
    quiet = np.concatenate([silence[: SR // 2], jfk_phrases[0], gap, blip * 0, silence])
    without = _replay(ct2_backend, tmp_path, quiet, settings)
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
    recorder = _replay(ct2_backend, tmp_path, np.concatenate(parts), settings)
    assert recorder.stats.held_back == 1 and recorder.stats.held_resumed == 0
    parts[3] = blip * 0
    without = _replay(ct2_backend, tmp_path, np.concatenate(parts), settings)
    done = [text for kind, text, _ in recorder.events if kind == "done"]
    assert done == [text for kind, text, _ in without.events if kind == "done"], recorder.events
    committed = " ".join(text for kind, text, _ in recorder.events if kind == "committed")
    assert committed == done[0]  # each word once


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
    recorder = _replay(ct2_backend, tmp_path, stream, settings)
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
    stats = _replay(ct2_backend, tmp_path, stream, settings).stats
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
    recorder = _replay(ct2_backend, tmp_path, samples, settings)
    commits = [text for kind, text, _ in recorder.events if kind == "committed"]
    words = [w.strip(".,").lower() for w in " ".join(commits).split()]
    phrase = ["to", "increase", "the", "audio", "volume", "from", "other", "participants"]
    found = [i for i in range(len(words)) if words[i : i + len(phrase)] == phrase]
    assert found, commits
