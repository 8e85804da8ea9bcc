"""The parts of live mode one at a time: streaming VAD, utterance events, LocalAgreement
(capture sources: tests/test_live_capture.py)."""

from __future__ import annotations

import numpy as np
import pytest

from kvscribe import audio
from kvscribe.live.agreement import Hypothesis, LocalAgreement, common_prefix
from kvscribe.voice.silero import WINDOW, SileroVad, VadSettings, VoiceDetector, level_dbfs
from tests.conftest import SAMPLE

SR = audio.SAMPLE_RATE


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    return audio.load_audio(SAMPLE)


# -- voice activity ---------------------------------------------------------------------------


def test_streaming_vad_equals_faster_whispers_whole_file_vad(jfk):
    """Fed in uneven chunks, the stateful VAD gives faster-whisper's own batch probabilities."""
    from faster_whisper.vad import get_vad_model

    whole = jfk[: (jfk.size // WINDOW) * WINDOW]
    reference = np.asarray(get_vad_model()(whole)).reshape(-1)
    vad, got, position = SileroVad(), [], 0
    for size in [100, 513, 2000, 7, 16000] * 50:
        got.append(vad.probabilities(whole[position : position + size]))
        position += size
        if position >= whole.size:
            break
    streamed = np.concatenate(got)
    assert streamed.size == reference.size == whole.size // WINDOW
    np.testing.assert_allclose(streamed, reference, atol=1e-4)
    assert reference.max() > 0.9 and reference.min() < 0.1  # speech and pauses both present


def _events(samples: np.ndarray, settings: VadSettings):
    detector = VoiceDetector(SileroVad(), settings)
    events = []
    for start in range(0, samples.size, 1600):
        events += detector.feed(samples[start : start + 1600])
    closing = detector.close(samples.size)
    return events + ([closing] if closing else [])


def test_two_sentences_apart_are_two_utterances_and_silence_is_none(jfk):
    gap = np.zeros(2 * SR, dtype=np.float32)
    stream = np.concatenate([gap, jfk, gap, jfk, gap])
    events = _events(stream, VadSettings(min_silence=1.5))
    ends = [e.sample / SR for e in events if e.kind == "end"]
    starts = [e.sample / SR for e in events if e.kind == "start"]
    assert len(starts) == len(ends) == 2
    second = 2 + jfk.size / SR + 2  # where the second copy begins
    assert 2.0 <= starts[0] < 2.5 and second <= starts[1] < second + 0.5
    assert ends[0] < second - 1.5  # the first ended in the gap, before the 2 s of silence ran out
    assert _events(np.zeros(5 * SR, dtype=np.float32), VadSettings()) == []


def test_short_pauses_cut_utterances_only_when_long_enough(jfk):
    """JFK pauses ~0.6 s and ~1.1 s between phrases: 0.5 s of silence cuts there, 1.5 s
    does not; a first phrase shorter than min_utterance waits for join_within."""
    cut = _events(jfk, VadSettings(min_silence=0.5, min_utterance=0.0))
    whole = _events(jfk, VadSettings(min_silence=1.5))
    assert sum(e.kind == "end" for e in cut) >= 3
    assert sum(e.kind == "end" for e in whole) == 1
    joined = _events(jfk, VadSettings(min_silence=0.5, min_utterance=2.5, join_within=1.5))
    assert sum(e.kind == "end" for e in joined) < sum(e.kind == "end" for e in cut)


def test_level_meter():
    assert level_dbfs(np.zeros(100, dtype=np.float32)) == -100.0
    assert level_dbfs(np.full(100, 0.5, dtype=np.float32)) == pytest.approx(-6.02, abs=0.01)


# -- LocalAgreement ----------------------------------------------------------------------------


def _hyp(*segments: tuple[str, float, float]) -> Hypothesis:
    return Hypothesis.from_segments(list(segments))


def test_commits_only_what_two_hypotheses_in_a_row_agree_on():
    agreement = LocalAgreement()
    assert agreement.update(_hyp(("and so am I", 0.0, 2.0)), hold=0) == []
    assert agreement.update(_hyp(("And so, my fellow", 0.0, 3.0)), hold=0) == ["And", "so,"]
    assert agreement.tentative == ["my", "fellow"]
    new = agreement.update(_hyp(("And so my fellow Americans", 0.0, 4.0)), hold=0)
    assert new == ["my", "fellow"]
    assert agreement.finish(_hyp(("And so my fellow Americans.", 0.0, 4.0))) == ["Americans."]
    assert agreement.committed == ["And", "so,", "my", "fellow", "Americans."]


def test_timed_words_hold_back_by_their_real_ends():
    """With the backend's word times, a long last word no longer shares its span evenly:
    "three" ends at 1.2 s though the estimate would put it at 3.0 s."""
    from kvscribe.types import Segment, Word

    times = [("one", 0.0, 0.4), ("two", 0.4, 0.8), ("three", 0.8, 1.2), ("fooour", 1.2, 4.0)]
    words = tuple(Word(a, b, " " + w, 0.9) for w, a, b in times)
    timed = Hypothesis.from_decode([Segment(0, 0.0, 4.0, " one two three fooour", words=words)])
    assert timed.ends == (0.4, 0.8, 1.2, 4.0)
    agreement = LocalAgreement()
    agreement.update(timed, hold=0)
    assert agreement.update(timed, hold=2.5) == ["one", "two", "three"]
    untimed = Hypothesis.from_decode([Segment(0, 0.0, 4.0, " one two three fooour")])
    assert untimed.ends == _hyp(("one two three fooour", 0.0, 4.0)).ends


def test_a_word_timed_in_two_pieces_is_committed_as_one():
    """Whisper's word timing splits "cold-hearted" and "Americans'" after the first piece;
    committed text joins them as the transcript writes them, not "cold -hearted"."""
    from kvscribe.types import Segment, Word

    times = [(" rather", 0.0, 0.4), (" cold", 0.4, 0.8), ("-hearted", 0.8, 1.3), (" and", 1.3, 1.5)]
    words = tuple(Word(a, b, w, 0.9) for w, a, b in times)
    hypothesis = Hypothesis.from_decode(
        [Segment(0, 0.0, 1.5, "".join(w for w, _, _ in times), words=words)]
    )
    assert hypothesis.words == ("rather", "cold-hearted", "and")
    assert hypothesis.ends == (0.4, 1.3, 1.5)


def _probable(words: str, ends: tuple[float, ...], probabilities: tuple[float, ...]):
    return Hypothesis(tuple(words.split()), ends, True, probabilities)


def test_unsure_last_words_are_those_under_an_even_chance_in_the_last_second():
    """From the first word under 0.5 that ends within a second of the last word's end; a
    doubtful word earlier, or none, holds nothing back; nor does a reading without
    probabilities (an estimate's)."""
    ends = (0.5, 1.0, 1.5, 2.0, 2.4)
    said = "and so my fellow Americans"
    assert _probable(said, ends, (0.9, 0.9, 0.9, 0.4, 0.9)).unsure_from(0) == 3
    assert _probable(said, ends, (0.9, 0.9, 0.9, 0.9, 0.3)).unsure_from(0) == 4
    assert _probable(said, ends, (0.9, 0.2, 0.9, 0.9, 0.9)).unsure_from(0) == 5  # 1.4 s before
    assert _probable(said, ends, (0.9, 0.9, 0.9, 0.9, 0.9)).unsure_from(0) == 5
    assert _probable(said, ends, (0.9, 0.9, 0.9, 0.4, 0.9)).unsure_from(4) == 5  # committed
    assert _hyp((said, 0.0, 2.4)).unsure_from(0) == 5


def test_an_utterance_end_holding_unsure_words_commits_them_when_read_again():
    """finish(hold_unsure=True) commits all but the unsure last words, which stay tentative;
    the next readings commit them as LocalAgreement does (two in a row agreeing), here read
    otherwise with the words after them; finish() without the hold commits them as read."""
    agreement = LocalAgreement()
    first = _probable(
        "and so my fellow Americans asked not",
        (0.3, 0.5, 0.7, 1.0, 1.6, 2.4, 2.7),
        (0.9, 0.9, 0.9, 0.9, 0.9, 0.45, 0.8),
    )
    assert agreement.finish(first, hold_unsure=True) == ["and", "so", "my", "fellow", "Americans"]
    assert agreement.tentative == ["asked", "not"]
    heard = "and so my fellow Americans ask not what your country"
    ends = (0.3, 0.5, 0.7, 1.0, 1.6, 2.4, 2.7, 4.0, 4.2, 4.6)
    again = _probable(heard, ends, (0.9,) * 10)
    assert agreement.update(again, hold=0) == []  # "ask" is not what the held words read
    assert agreement.update(again, hold=1.0) == ["ask", "not"]  # 1 s of words after them
    assert agreement.finish(again) == ["what", "your", "country"]
    held = LocalAgreement()
    held.finish(first, hold_unsure=True)
    assert held.finish(first) == ["asked", "not"]


def test_words_without_enough_speech_after_them_wait():
    agreement = LocalAgreement()
    agreement.update(_hyp(("one two three four", 0.0, 4.0)), hold=0)
    # Estimated word ends: 1.0, 2.0, 3.0, 4.0 s (equal lengths): 1.5 s of words must follow.
    assert agreement.update(_hyp(("one two three four", 0.0, 4.0)), hold=1.5) == ["one", "two"]
    assert agreement.update(_hyp(("one two three four", 0.0, 4.0)), hold=0) == [
        "three",
        "four",
    ]


def test_a_dropped_committed_word_does_not_duplicate_the_next():
    agreement = LocalAgreement()
    agreement.update(_hyp(("ask not what your", 0.0, 2.0)), hold=0)
    agreement.update(_hyp(("ask not what your country", 0.0, 3.0)), hold=0)
    assert agreement.committed == ["ask", "not", "what", "your"]
    # The decoder now drops "ask": alignment finds "what your" one place earlier.
    new = agreement.update(_hyp(("not what your country can do", 0.0, 4.0)), hold=0)
    assert new == ["country"]
    new = agreement.update(_hyp(("not what your country can do for", 0.0, 4.5)), hold=0)
    assert new == ["can", "do"]
    assert agreement.committed == ["ask", "not", "what", "your", "country", "can", "do"]


@pytest.mark.parametrize(
    ("heard", "now"),
    [("those key words.", "those keywords."), ("those keywords.", "those key words.")],
)
def test_committed_words_the_decoder_now_joins_or_splits_are_not_committed_again(heard, now):
    """Committed words reread joined or split otherwise: what follows them is new, no more
    and no less."""
    agreement = LocalAgreement()
    agreement.update(_hyp((heard, 0.0, 2.0)), hold=0)
    assert agreement.update(_hyp((heard, 0.0, 2.0)), hold=0) == heard.split()
    assert agreement.finish(_hyp((f"{now} Press 8 to forward", 0.0, 4.0))) == [
        "Press",
        "8",
        "to",
        "forward",
    ]


def test_words_in_the_committed_first_seconds_are_skipped_however_they_read():
    """A buffer that starts with 2 s of speech committed before it (live mode's context):
    the words the decoder ends there are not committed, misread or not."""
    agreement = LocalAgreement.after(2.0, ["Agent", "logged", "off."])
    context, own = ("Agent -Log -Doff.", 0.0, 1.8), ("Press 8 to forward", 2.5, 4.5)
    assert agreement.update(_hyp(context, own), hold=0) == []
    assert agreement.tentative == ["Press", "8", "to", "forward"]
    assert agreement.update(_hyp(("Agent logged off.", 0.0, 1.8), own), hold=1.0) == [
        "Press",
        "8",
    ]
    assert agreement.finish(_hyp(context, own)) == ["to", "forward"]


def test_a_last_committed_word_timed_past_the_context_is_not_committed_again():
    """The alignment may stretch the context's last word over the pause after it, past the
    new speech's onset: the words it repeats from the context's end are skipped."""
    agreement = LocalAgreement.after(2.0, ["hash", "key."])
    context, own = ("Please press the hash", 0.0, 1.8), ("key, and BS.", 1.8, 3.5)
    assert agreement.finish(_hyp(context, own)) == ["and", "BS."]


def test_a_word_between_two_utterances_that_neither_committed_is_kept():
    """Through the page (a browser's microphone), the voice detector heard no speech in "ask"
    between "... Americans." and "not what ...": the next buffer's decoder read it, but
    timed it before the onset, where the committed context is, and it was skipped. The
    committed words are found in the reading ("American" for "Americans."): what follows
    them is new."""
    agreement = LocalAgreement.after(3.88, ["my", "fellow", "Americans."])
    context = ("And so my fellow American", 0.0, 2.2)
    missed, own = ("ask", 2.2, 3.8), ("not what your country", 4.0, 6.0)
    assert agreement.finish(_hyp(context, missed, own)) == ["ask", "not", "what", "your", "country"]


def test_cut_points_and_dropping_a_committed_sentence():
    agreement = LocalAgreement()
    first = _hyp(("We choose the moon.", 0.0, 2.0), ("Not because it is", 2.0, 4.0))
    agreement.update(first, hold=0)
    agreement.update(first, hold=0)
    assert agreement.cut_point(sentences_only=False) == (8, 4.0)  # everything committed
    assert agreement.cut_point(sentences_only=True) == (4, 2.0)  # where a sentence ends
    second = _hyp(("We choose the moon. Not because it is easy", 0.0, 5.0))
    agreement.update(second, hold=0)
    assert agreement.cut_point(sentences_only=True)[0] == 4
    assert agreement.drop(4, 2.0) == ["We", "choose", "the", "moon."]
    assert agreement.committed == ["Not", "because", "it", "is"]
    assert agreement.tentative == ["easy"]
    assert agreement.latest.ends[-1] == pytest.approx(3.0)


def test_a_new_buffer_repeating_the_words_cut_off_does_not_commit_them_twice():
    agreement = LocalAgreement()
    sentence = _hyp(("We choose to go to the moon.", 0.0, 3.0))
    agreement.update(sentence, hold=0)
    agreement.update(sentence, hold=0)
    agreement.drop(7, 3.0)
    # The cut came early: the new buffer starts with the end of the old sentence.
    agreement.update(_hyp(("the moon. We choose", 0.0, 2.0)), hold=0)
    assert agreement.update(_hyp(("the moon. We choose to", 0.0, 2.5)), hold=0) == ["We", "choose"]


def test_committed_number_words_are_found_again_read_as_digits():
    """The realform telephone recording over its noise floor: "seven or nine" committed
    before the buffer was cut after "Five to extend the conference.", then the new buffer
    reads the same words in digits. Counted by letters instead, the committed words seemed
    to run on to "decrease", and "to decrease or increase your" was never committed."""
    agreement = LocalAgreement()
    agreement.update(_hyp(("Five to extend the conference. seven or nine", 0.0, 3.6)), hold=0)
    agreement.update(_hyp(("Five to extend the conference. seven or nine to", 0.0, 4.0)), hold=0)
    assert agreement.committed[-3:] == ["seven", "or", "nine"]
    agreement.drop(5, 1.8)
    after = _hyp(("7 or 9 to decrease or increase your volume.", 0.0, 4.0))
    assert agreement.update(after, hold=0) == ["to"]  # as the hypothesis before read it
    assert agreement.tentative == ["decrease", "or", "increase", "your", "volume."]
    assert common_prefix(["Seven", "or", "9"], ["7", "or", "nine,"]) == 3


def test_forcing_commits_all_but_the_newest_words():
    agreement = LocalAgreement()
    agreement.update(_hyp(("one two three four", 0.0, 4.0)), hold=0)
    assert agreement.force(hold=1.5) == ["one", "two"]
    assert agreement.tentative == ["three", "four"]


def test_common_prefix_ignores_case_and_punctuation():
    assert common_prefix(["And", "so,", "my"], ["and", "so", "am"]) == 2


def test_encoder_window_30_is_whispers_own_window_and_below_1_s_is_refused():
    from kvscribe.errors import UsageError
    from kvscribe.options import LiveOptions

    def asked(value):
        return LiveOptions(source="talk.wav", encoder_window=value).request_fields()

    assert asked(None)["encoder_window"] is None
    assert asked(30.0)["encoder_window"] is None
    assert asked(12.0)["encoder_window"] == 12.0
    with pytest.raises(UsageError) as refused:
        asked(0.5)
    assert refused.value.one_line().startswith("--encoder-window: must be between 1 and 30")


def test_a_tail_read_again_keeps_only_what_its_speech_can_hold():
    """A decode of the speech a reading stopped short of, prompted, may run on into the
    quiet after it ("participants. Thank you for being here, thank you ..."): only words
    ending within the speech (and its pad) count, at most four a second."""
    rest = Hypothesis(
        ("participants.", "Thank", "you", "for", "being", "here,", "thank"),
        (0.55, 0.7, 0.8, 0.9, 1.1, 1.3, 1.5),
        timed=True,
    )
    assert rest.within(0.8).words == ("participants.", "Thank", "you", "for")
    assert rest.within(0.4).words == ("participants.", "Thank")
    assert rest.within(0.25).words == ("participants.",)
    assert rest.within(0.1).words == ()
