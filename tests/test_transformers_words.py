"""Word timestamps for the transformers backend (alignment heads + DTW) and kvscribe.timing.words,
on the real converted tiny.en, its real tokenizer and real audio, checked against
faster-whisper's own word timestamps."""

from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kvscribe import models  # noqa: E402
from kvscribe.audio import SAMPLE_RATE, load_audio  # noqa: E402
from kvscribe.contract import DecodeRequest  # noqa: E402
from kvscribe.timing.words import (  # noqa: E402
    Durations,
    SegmentWords,
    WordTiming,
    clamp_at_sentence_ends,
    fit_to_segment,
    measure_durations,
    merge_punctuations,
    split_on_unicode,
    split_words,
)
from tests import loaded  # noqa: E402
from tests.conftest import EVAL_DIR, SAMPLE  # noqa: E402

pytestmark = [pytest.mark.transformers, pytest.mark.eval]

# Short eval clips (one window each) whose tiny.en transcripts agree with faster-whisper's,
# so the words can be matched one to one.
EVAL_CLIPS = [
    EVAL_DIR / f"{name}.wav"
    for name in ("ps_librivox_ss01_0870", "ps_librivox_ss01_0890", "ps_librivox_ss01_0920")
]
CLIPS = [SAMPLE, *(clip for clip in EVAL_CLIPS if clip.exists())]
BEAMS = 5
MEDIAN_START_TOLERANCE = 0.2  # seconds: issue 14's bound against faster-whisper's words


# ------------------------------------------------------- kvscribe.timing.words, real tokenizer


@functools.cache
def _tokenizer():
    from tokenizers import Tokenizer

    from kvscribe.models.vocab import special_tokens

    path = models.resolve(None, ("transformers",)).path / "tokenizer.json"
    return Tokenizer.from_file(str(path)), special_tokens(path)


def _decode(ids: list[int]) -> str:
    return _tokenizer()[0].decode(ids, skip_special_tokens=False)


def _ids(text: str) -> list[int]:
    return _tokenizer()[0].encode(text, add_special_tokens=False).ids


def _timings(text: str) -> list[WordTiming]:
    eot = _tokenizer()[1].eot
    words, groups = split_words([*_ids(text), eot], _decode, eot)
    return [WordTiming(w, g) for w, g in zip(words[:-1], groups[:-1], strict=True)]


def test_words_start_at_spaces_and_punctuation_and_keep_all_their_tokens():
    eot = _tokenizer()[1].eot
    ids = _ids(" kvscribe works, said he")
    words, groups = split_words([*ids, eot], _decode, eot)
    assert words == [" kvscribe", " works", ",", " said", " he", "<|endoftext|>"]
    assert len(groups[0]) > 1  # " kvscribe" is several tokens, grouped into one word
    assert [t for g in groups for t in g] == [*ids, eot]


def test_unspaced_languages_split_where_tokens_complete_a_character():
    ids = _ids(" 日本語です")
    pieces = [_decode([t]) for t in ids]
    assert any("\ufffd" in p for p in pieces)  # the tokenizer cuts characters mid-UTF-8
    words, groups = split_words(ids, _decode, _tokenizer()[1].eot, language="ja")
    assert words == [" 日", "本", "語", "で", "す"]
    assert [t for g in groups for t in g] == ids
    # English rules on the same tokens: no spaces inside, so one word.
    assert split_words(ids, _decode, _tokenizer()[1].eot)[0] == [" 日本語です"]


def test_a_real_replacement_character_in_the_text_is_not_taken_for_a_cut_one():
    ids = _ids(" a\ufffdb")
    words, _ = split_on_unicode(ids, _decode)
    assert "".join(words) == " a\ufffdb"


def test_punctuation_merges_into_its_neighbours_and_leaves_empty_places():
    timings = _timings(' He said "hello," then (quietly) left.')
    merge_punctuations(timings)
    assert [t.word for t in timings] == [
        " He",
        " said",
        ' "hello,"',
        " then",
        " (quietly)",
        "",
        " left.",
        "",
    ]
    assert [t.tokens for t in timings if not t.word] == [[], []]
    all_tokens = [token for t in timings for token in t.tokens]
    assert all_tokens == _ids(' He said "hello," then (quietly) left.')


def test_a_lone_opening_mark_joins_the_word_after_it():
    timings = _timings(" ( yes")
    assert [t.word for t in timings] == [" (", " yes"]
    merge_punctuations(timings)
    assert [t.word for t in timings] == ["", " ( yes"]


def test_median_word_length_is_capped_and_sentence_marks_are_trimmed_to_twice_it():
    words = [
        WordTiming(" One", [], 0.0, 0.3),
        WordTiming(".", [], 0.3, 2.3),  # stretched over the pause
        WordTiming(" Two", [], 2.3, 4.0),  # starts a sentence: stretched back into the pause
        WordTiming(" three", [], 4.0, 4.3),
        WordTiming(" four", [], 4.3, 4.5),
        WordTiming(" gap", [], 4.5, 4.5),  # zero-length words do not count
    ]
    durations = measure_durations(words)
    assert durations.median == pytest.approx(0.3)  # of 0.2, 0.3, 0.3, 1.7, 2.0
    assert durations.longest == pytest.approx(0.6)
    assert measure_durations([WordTiming(" long", [], 0.0, 5.0)]).median == 0.7  # capped
    assert measure_durations([]) == Durations()
    clamp_at_sentence_ends(words, durations)
    assert (words[1].start, words[1].end) == pytest.approx((0.3, 0.9))
    assert (words[2].start, words[2].end) == pytest.approx((3.4, 4.0))
    assert (words[3].start, words[3].end) == pytest.approx((4.0, 4.3))  # not at a boundary


def test_a_long_first_word_after_a_pause_is_cut_to_twice_the_median():
    segment = SegmentWords(
        5.0, 8.0, [WordTiming(" Well", [], 1.0, 5.6), WordTiming(" no", [], 5.6, 6.0)]
    )
    end = fit_to_segment(segment, Durations(0.3, 0.6), last_speech=0.5)
    assert (segment.words[0].start, segment.words[0].end) == pytest.approx((5.0, 5.6))
    assert segment.start == pytest.approx(5.0)
    assert end == segment.end == pytest.approx(6.0)  # the segment ends with its last word


def test_a_last_word_running_past_its_segment_is_pulled_back():
    segment = SegmentWords(
        0.0, 2.0, [WordTiming(" so", [], 0.0, 0.3), WordTiming(" on", [], 1.8, 3.5)]
    )
    fit_to_segment(segment, Durations(0.3, 0.6), last_speech=0.0)
    assert segment.words[-1].end == pytest.approx(2.1)  # start + median: at least one median
    assert segment.end == 2.0


# ---------------------------------------------------------------- the aligner on real audio


def _backend():
    return loaded.backend("transformers", "no-loss")


@functools.cache
def _aligned(clip: Path):
    """(segments, words per segment) from the backend's own decode, aligned by WordAligner
    on the window's encoder output (one window: the clips are under 30 s)."""
    from kvscribe.audio.mel import FRAMES_PER_WINDOW, log_mel
    from kvscribe.backends.transformers.alignment import WordAligner

    backend = _backend()
    audio = load_audio(clip)
    segments = _transcribed(clip, word_timestamps=False)  # the decode, shared with its tests
    assert segments and {s.window for s in segments} == {0}
    mel = log_mel(torch.from_numpy(audio), backend.network.config.num_mel_bins)
    window_frames = mel.shape[-1] - FRAMES_PER_WINDOW
    encoded = backend.engine.encode(mel[:, :FRAMES_PER_WINDOW])
    aligner = WordAligner(backend.network, backend.special, backend._text, "cpu", backend.dtype)
    words = aligner(encoded, [s.tokens for s in segments], window_frames, 0.0)
    return segments, words, window_frames / 100


@functools.cache
def _faster_whisper():
    """faster-whisper's own model on the same tiny.en, loaded once for every clip, on one
    thread as each of the suite's workers decodes."""
    from faster_whisper import WhisperModel

    source = models.resolve(None, ("ctranslate2",))
    return WhisperModel(str(source.path), device="cpu", compute_type="float32", cpu_threads=1)


@functools.cache
def _faster_whisper_words(clip: Path, beams: int):
    segments, _ = _faster_whisper().transcribe(str(clip), beam_size=beams, word_timestamps=True)
    return [w for s in segments for w in s.words]


def _normalised(word: str) -> str:
    return re.sub(r"[^a-z0-9']", "", word.lower())


def _start_differences(ours, theirs) -> list[float]:
    """|start difference| of the words both have, matched by normalised text in order."""
    mine, other = [_normalised(w.word) for w in ours], [_normalised(w.word) for w in theirs]
    matcher = difflib.SequenceMatcher(None, mine, other, autojunk=False)
    return [
        abs(ours[block.a + k].start - theirs[block.b + k].start)
        for block in matcher.get_matching_blocks()
        for k in range(block.size)
    ]


@pytest.mark.parametrize("clip", CLIPS, ids=lambda c: c.stem)
def test_words_are_in_order_inside_their_segments_and_spell_the_text(clip):
    segments, words, window_seconds = _aligned(clip)
    assert len(words) == len(segments)
    flat = [w for per_segment in words for w in per_segment]
    assert flat, "no words"
    for segment, per_segment in zip(segments, words, strict=True):
        assert "".join(w.word for w in per_segment).split() == segment.text.split()
        assert per_segment[0].word.startswith(" ")  # words keep the tokenizer's space
        for word in per_segment:
            assert 0.0 <= word.probability <= 1.0
            assert word.start <= word.end
            # openai-whisper pulls edge words back to within 0.5 s of the segment's stamps
            assert segment.start - 0.5 <= word.start and word.end <= segment.end + 0.5
    starts = [w.start for w in flat]
    assert starts == sorted(starts)
    assert starts[0] >= 0.0 and flat[-1].end <= window_seconds + 0.02
    assert np.mean([w.probability for w in flat]) > 0.5  # the text is what the model said


@pytest.mark.parametrize("clip", CLIPS, ids=lambda c: c.stem)
def test_word_starts_agree_with_faster_whisper_within_a_fifth_of_a_second(clip):
    _, words, _ = _aligned(clip)
    ours = [w for per_segment in words for w in per_segment]
    theirs = _faster_whisper_words(clip, BEAMS)
    differences = _start_differences(ours, theirs)
    assert len(differences) >= 0.8 * max(len(ours), len(theirs))  # the same words, mostly
    assert np.median(differences) <= MEDIAN_START_TOLERANCE


def test_frames_past_the_audio_are_never_chosen():
    """Half the JFK window's content: every word must end inside that half."""
    from kvscribe.audio.mel import FRAMES_PER_WINDOW, log_mel
    from kvscribe.backends.transformers.alignment import WordAligner

    backend = _backend()
    segments, _, _ = _aligned(SAMPLE)
    mel = log_mel(torch.from_numpy(load_audio(SAMPLE)), backend.network.config.num_mel_bins)
    encoded = backend.engine.encode(mel[:, :FRAMES_PER_WINDOW])
    aligner = WordAligner(backend.network, backend.special, backend._text, "cpu", backend.dtype)
    words = aligner(encoded, [s.tokens for s in segments], 500, 10.0)
    flat = [w for per_segment in words for w in per_segment]
    assert flat and all(10.0 <= w.start <= w.end <= 15.0 + 0.5 for w in flat)
    assert flat[0].start == pytest.approx(10.0, abs=0.1)  # offset applied


def test_a_model_without_alignment_heads_is_refused_at_construction():
    from kvscribe.backends.transformers.alignment import WordAligner

    backend = _backend()
    with pytest.raises(ValueError, match="alignment heads"):
        WordAligner(backend.network, backend.special, backend._text, "cpu", backend.dtype, heads=())


def test_the_converted_tiny_en_carries_alignment_heads():
    from kvscribe.backends.transformers.alignment import alignment_heads

    heads = alignment_heads(models.resolve(None, ("transformers",)).path)
    layers = _backend().network.config.decoder_layers
    assert heads and all(0 <= layer < layers for layer, _ in heads)


# ---------------------------------------------------------------- through backend.transcribe

# A fixture's file (tests/conftest.py): two windows, the second's offsets from seek (and two
# speech chunks, batched).
LONG_FORM = "long_form_two_chunks"
# Greedy there, by us and faster-whisper alike: its windows' and chunks' offsets are the
# question, and the short clips at beam 5 time the words of a beam search.
LONG_FORM_BEAMS = 1
TRANSCRIBED = [*CLIPS, LONG_FORM]


def _clip(clip: Path | str, request: pytest.FixtureRequest) -> tuple[Path, int]:
    """The clip's file and the beams it is decoded with."""
    if isinstance(clip, str):
        return request.getfixturevalue(clip), LONG_FORM_BEAMS
    return clip, BEAMS


def _transcribed(clip: Path, word_timestamps: bool = True, batch_size: int = 1, beams: int = BEAMS):
    return _decoded(clip, word_timestamps, batch_size, beams)  # one cache key however called


@functools.cache
def _decoded(clip: Path, word_timestamps: bool, batch_size: int, beams: int):
    request = DecodeRequest(beam_size=beams, word_timestamps=word_timestamps, batch_size=batch_size)
    return list(_backend().transcribe(load_audio(clip), request).segments)


@pytest.mark.parametrize("clip", TRANSCRIBED, ids=lambda c: getattr(c, "stem", c))
@pytest.mark.slow
def test_transcribe_gives_each_segment_its_words_in_order(clip, request):
    clip, beams = _clip(clip, request)
    segments = _transcribed(clip, beams=beams)
    flat = [w for s in segments for w in s.words]
    assert flat and all(s.words for s in segments)
    for segment in segments:
        assert "".join(w.word for w in segment.words).split() == segment.text.split()
        # openai-whisper's rule: a segment with timed words spans them
        assert segment.start == segment.words[0].start and segment.end == segment.words[-1].end
        assert all(segment.start <= w.start <= w.end <= segment.end for w in segment.words)
        assert all(0.0 <= w.probability <= 1.0 for w in segment.words)
    starts = [w.start for w in flat]
    assert starts == sorted(starts)
    assert flat[-1].end <= load_audio(clip).size / SAMPLE_RATE + 0.02


@pytest.mark.parametrize("clip", TRANSCRIBED, ids=lambda c: getattr(c, "stem", c))
@pytest.mark.slow
def test_transcribed_word_starts_agree_with_faster_whisper(clip, request):
    clip, beams = _clip(clip, request)
    ours = [w for s in _transcribed(clip, beams=beams) for w in s.words]
    theirs = _faster_whisper_words(clip, beams)
    differences = _start_differences(ours, theirs)
    assert len(differences) >= 0.8 * max(len(ours), len(theirs))
    assert np.median(differences) <= MEDIAN_START_TOLERANCE


def test_words_only_when_asked_and_the_text_does_not_change():
    plain = _transcribed(SAMPLE, word_timestamps=False)
    timed = _transcribed(SAMPLE)
    assert all(s.words == () for s in plain)
    assert [s.text for s in plain] == [s.text for s in timed]
    assert [s.tokens for s in plain] == [s.tokens for s in timed]


@pytest.mark.slow
def test_batched_chunks_time_their_words_on_the_input_s_clock(long_form_two_chunks):
    segments = _transcribed(long_form_two_chunks, batch_size=4, beams=LONG_FORM_BEAMS)
    assert len({s.window for s in segments}) > 1  # several chunks, each with its own offset
    assert all(s.words and s.start == s.words[0].start for s in segments)
    ours = [w for s in segments for w in s.words]
    assert [w.start for w in ours] == sorted(w.start for w in ours)
    differences = _start_differences(
        ours, _faster_whisper_words(long_form_two_chunks, LONG_FORM_BEAMS)
    )
    assert len(differences) >= 0.8 * len(ours)
    assert np.median(differences) <= MEDIAN_START_TOLERANCE
