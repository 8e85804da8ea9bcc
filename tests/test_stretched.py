"""`--batch-size 1`: speech the decoder skipped, found under a stretched word and read again
(backends/ctranslate2/stretched.py)."""

from __future__ import annotations

import dataclasses

import pytest

from kvscribe.adapters import faster_whisper as adapter
from kvscribe.audio import load_audio
from kvscribe.backends.ctranslate2 import stretched
from kvscribe.bench.wer import pooled_wer
from kvscribe.contract import DecodeRequest
from kvscribe.models.embedded import EMBEDDED
from kvscribe.pipeline import transcribe_speech
from tests import loaded
from tests.conftest import ROOT, basic_normalised, longest_deleted_run
from tests.fw_segments import fw_segment, fw_word


@pytest.fixture(scope="module")
def engine():
    return loaded.ctranslate2_on_threads(2).engine


def _word(start: float, end: float, text: str):
    return fw_word(start, end, text)


def _segment(engine, words: list, seek: int = 0):
    """A segment of `words` with the tokens the real tokenizer gives their text."""
    text = "".join(w.word for w in words)
    tokens = adapter.tokenizer(engine, "transcribe", "en").encode(text)
    return fw_segment(words, tokens=tokens, seek=seek)


def _spliced(engine, segments: list, reread) -> list:
    words_of = stretched._WordTokens(engine, "transcribe", "en")
    return list(stretched.read_again(iter(segments), reread, words_of))


def test_a_word_no_longer_than_two_seconds_is_read_once(engine):
    """No word over STRETCHED_SECONDS: the segments as they came, nothing read again."""
    segment = _segment(engine, [_word(1.0, 1.4, " Press"), _word(1.4, 3.4, " seven.")])
    calls = []
    assert _spliced(engine, [segment], lambda *args: calls.append(args) or []) == [segment]
    assert calls == []


def test_the_stretch_under_a_last_word_is_read_again_and_put_after_it(engine):
    """The noisy telephone recording's case: " the" over 6.6 s ends a segment; the stretch is
    read again from the word's start, prompted with the text before it, and the word the new
    reading hears again is its, not the first reading's."""
    segment = _segment(engine, [_word(10.0, 10.4, " extend"), _word(10.4, 17.0, " the")], seek=1000)
    calls = []

    def reread(start, end, before):
        calls.append((start, end, before))
        words = [_word(10.5, 10.7, " the"), _word(10.7, 11.3, " conference,")]
        return [_segment(engine, words, seek=1050)]

    head, again = _spliced(engine, [segment], reread)
    assert calls == [(10.4, 17.0, " extend")]
    assert head.text == " extend" and head.end == 10.4 and head.start == segment.start
    assert adapter.tokenizer(engine, "transcribe", "en").decode(head.tokens) == " extend"
    assert again.text == " the conference,"
    assert " ".join(s.text for s in (head, again)).split() == ["extend", "the", "conference,"]


def test_a_stretched_word_not_heard_again_is_kept_ending_where_the_new_reading_starts(engine):
    segment = _segment(engine, [_word(2.0, 2.3, " Press"), _word(2.3, 8.0, " one")])
    words = [_word(3.1, 3.5, " to"), _word(3.5, 3.9, " record.")]
    head, again = _spliced(engine, [segment], lambda *args: [_segment(engine, words)])
    assert head.text == " Press one" and head.words[-1].end == 3.1
    assert again.text == " to record."


def test_a_word_stretched_inside_a_segment_cuts_it_around_the_new_reading(engine):
    """A stretched word with words after it: the head, the new reading, then the tail with
    the tokens after the stretched word's, so no token is written twice or lost."""
    words = [_word(0.0, 0.5, " Press"), _word(0.5, 4.0, " four"), _word(4.0, 4.4, " now.")]
    segment = _segment(engine, words)
    again_words = [_word(0.6, 0.9, " four"), _word(1.0, 1.5, " or"), _word(1.6, 2.0, " six")]
    head, again, tail = _spliced(engine, [segment], lambda *args: [_segment(engine, again_words)])
    assert [head.text, again.text, tail.text] == [" Press", " four or six", " now."]
    assert [s.start for s in (head, again, tail)] == sorted(s.start for s in (head, again, tail))
    decode = adapter.tokenizer(engine, "transcribe", "en").decode
    assert decode(head.tokens) + decode(tail.tokens) == " Press now."


def test_a_stretch_read_again_to_nothing_leaves_the_segment_as_it_was(engine):
    segment = _segment(engine, [_word(5.0, 5.3, " Goodbye"), _word(5.3, 9.0, " now.")])
    (kept,) = _spliced(engine, [segment], lambda *args: [])
    assert kept.text == segment.text and kept.words[-1].end == 9.0


def test_a_made_up_reading_of_the_stretch_is_left_out():
    """A stretch read alone can come back as words no one said, all unlikely: openai-whisper's
    hallucination test drops it, as the batched path drops such a reread."""
    made_up = fw_segment(
        [fw_word(0.0, 0.05, " Thank", 0.05), fw_word(0.05, 3.0, " you.", 0.1)],
        tokens=[1, 2],
        avg_logprob=-1.5,
        no_speech_prob=0.5,
    )
    heard = _segment_like(made_up, probability=0.9, ends=(0.4, 0.8))
    assert not stretched._plausible(made_up)
    assert stretched._plausible(heard)


def test_a_reading_that_hears_only_punctuation_ends_the_stretch(engine):
    """A stretch read again over noise came back as " . . . ." (each dot aligned as a word
    over seconds) and its dots' stretches were read again, window after window: the reading
    ends at such a segment, and the window after it is never decoded."""
    windows = [
        _segment(engine, [_word(0.0, 0.5, " Press"), _word(0.5, 0.9, " one.")]),
        _segment(engine, [_word(1.0, 3.5, " ."), _word(3.5, 6.0, " .")]),
        _segment(engine, [_word(6.0, 6.5, " Goodbye.")]),
    ]
    decoded = []

    def decode():
        for window in windows:
            decoded.append(window)
            yield window

    assert list(stretched.heard(decode())) == windows[:1]
    assert decoded == windows[:2]


def _segment_like(segment, probability: float, ends: tuple[float, float]):
    words = [
        fw_word(start, end, w.word, probability)
        for w, start, end in zip(segment.words, (0.0, ends[0]), ends, strict=True)
    ]
    return dataclasses.replace(segment, words=words)


FRENCH = ROOT / "eval" / "realform" / "asterisk_fr_ivr_dev.wav"
NOISY = ROOT / "eval" / "realform" / "asterisk_en_ivr_dev_noisy.wav"


@pytest.mark.model
@pytest.mark.skipif(not EMBEDDED["base"].installed(), reason="base is not installed")
def test_a_window_that_skips_speech_loses_no_prompt_and_reads_none_twice():
    """base, French telephone prompts (183 s), `--batch-size 1`: on MKL a window's decode
    jumped over three prompts (37 words) with timestamps that said it had not, and the next
    windows read the two prompts after them twice (WER 0.247 against faster-whisper
    sequential's 0.124). With the seek following aligned words, no run of 5 reference words
    is missing and no prompt is read twice."""
    backend = loaded.ctranslate2_on_threads(2, model="base")
    run = transcribe_speech(backend, load_audio(FRENCH), DecodeRequest(language="fr", batch_size=1))
    segments = list(run.segments)
    text = basic_normalised(" ".join(s.text for s in segments))
    reference = FRENCH.with_suffix(".txt").read_text(encoding="utf-8")
    assert longest_deleted_run(reference, text) < 5
    assert text.count("tentative de placement") == 1
    assert all(not s.words for s in segments)  # aligned for the seek, not asked for
    starts = [s.start for s in segments]
    assert starts == sorted(starts)


@pytest.mark.model
def test_speech_under_a_stretched_word_is_read_again_on_a_long_recording():
    """tiny.en, the noisy telephone recording (365 s), `--batch-size 1`: with the seek on
    aligned words, " the" was aligned over 6.6 s where 14 words were said, and the next
    window began after it. Read again, no run of 5 reference words is missing; the WER
    stays within faster-whisper sequential's (0.032 on this recording) + 0.04."""
    backend = loaded.ctranslate2_on_threads(2)
    run = transcribe_speech(backend, load_audio(NOISY), DecodeRequest(batch_size=1))
    text = " ".join(s.text for s in run.segments)
    reference = NOISY.with_suffix(".txt").read_text(encoding="utf-8")
    assert longest_deleted_run(reference, text) < 5
    assert pooled_wer([(reference, text)]) <= 0.072


def test_a_long_gap_between_two_words_is_read_again_between_them(engine):
    """A window that starts late: nothing aligned over the speech it skipped. A gap over
    GAP_SECONDS before a word is read again and put in before it; a shorter pause is not."""
    words = [_word(1.0, 1.4, " Goodbye."), _word(1.4 + stretched.GAP_SECONDS + 0.5, 8.0, " Press")]
    segment = _segment(engine, words)
    calls = []

    def reread(start, end, before):
        calls.append((start, end))
        return [_segment(engine, [_word(3.0, 3.4, " Welcome.")])]

    head, again, tail = _spliced(engine, [segment], reread)
    assert calls == [(1.4, words[1].start)]
    assert [head.text, again.text, tail.text] == [" Goodbye.", " Welcome.", " Press"]
    paused = [_word(1.0, 1.4, " Goodbye."), _word(1.4 + stretched.GAP_SECONDS - 0.5, 7.0, " Press")]
    assert _spliced(engine, [_segment(engine, paused)], reread) == [_segment(engine, paused)]
