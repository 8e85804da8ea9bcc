"""Speech a batched chunk's decode left uncovered, read again (kvscribe/rereads.py
`uncovered`, `packed`; kvscribe/aligned_chunks.py `within`, `without_echoes`): where
the stretches are, how they share windows and get their words back, and what a re-read
keeps. The real model's side of it is in tests/test_batched.py."""

from __future__ import annotations

from kvscribe.aligned_chunks import AlignedChunk
from kvscribe.audio import SAMPLE_RATE
from kvscribe.chunking import Chunk
from kvscribe.decoding import Fallback, per_row
from kvscribe.rereads import decode_chunks, packed, uncovered, unfinished
from kvscribe.timing.timed_words import TimedWord


def test_a_chunk_the_decoder_left_early_is_decoded_again_from_where_it_stopped():
    """Where the last aligned word ends (1.0 s + 21.4 s here) the rest of the chunk is
    decoded again, unless less than MIN_UNFINISHED (1.5 s: five fast words) of its speech
    is left, or it said nothing."""
    chunk = Chunk(16_000, 16_000 + 27 * SAMPLE_RATE, speech_end=16_000 + 26 * SAMPLE_RATE)

    def decoded(last_word_end: float, tokens=(400,)) -> AlignedChunk:
        word = TimedWord(last_word_end - 0.4, last_word_end, " word", 0.9, tuple(tokens))
        return AlignedChunk(list(tokens), -0.2, 0.01, words=(word,) if tokens else ())

    tail = unfinished(chunk, decoded(22.4))
    start = 16_000 + round(21.4 * SAMPLE_RATE)
    assert tail == Chunk(start, chunk.end, chunk.speech_end, reread=True)
    assert unfinished(chunk, decoded(26.6)) is None  # 0.4 s of speech left
    assert unfinished(chunk, decoded(25.7)) is None  # 1.3 s: a word or two at most
    assert unfinished(chunk, decoded(25.3)) == chunk.after(round(25.3 * SAMPLE_RATE))
    assert unfinished(chunk, decoded(5.0, tokens=())) is None  # silence: no text


def _words_at(*spans: tuple[float, float]) -> AlignedChunk:
    words = tuple(TimedWord(a, b, " word", 0.9, (400,)) for a, b in spans)
    return AlignedChunk([400] * len(words), -0.2, 0.01, words=words)


def test_speech_the_decoder_skipped_before_between_or_after_its_words_is_decoded_again():
    """A 27 s chunk (speech to 26 s) whose words leave 3 s unheard at its start, 2 s in its
    middle and 4 s at its end: each is decoded again, on its own part of the chunk. A gap
    shorter than MIN_UNFINISHED (a word's alignment slack, or a word or two) is not, nor a
    pause the chunk cut out of its decoded audio, nor a chunk judged silent."""
    s = SAMPLE_RATE
    chunk = Chunk(0, 27 * s, speech_end=26 * s)
    parts = uncovered(chunk, _words_at((3.0, 3.5), (3.9, 10.0), (12.0, 22.0)))
    assert [(p.start, p.end) for p in parts] == [(0, 3 * s), (10 * s, 12 * s), (22 * s, 27 * s)]
    assert all(p.reread for p in parts) and not chunk.reread
    assert uncovered(chunk, _words_at((0.5, 10.0), (10.8, 25.5))) == []
    assert uncovered(chunk, _words_at((1.3, 10.0), (11.3, 24.7))) == []  # 1.3 s each
    cut = Chunk(0, 27 * s, speech_end=26 * s, spans=((0, 10 * s), (14 * s, 27 * s)))
    assert uncovered(cut, _words_at((0.2, 9.8), (14.3, 25.5))) == []  # the gap was the pause
    assert uncovered(chunk, AlignedChunk([], -0.2, 0.9)) == []


def test_stretches_read_again_share_a_window_per_input_and_each_gets_its_own_words_back():
    """Three stretches of two chunks of one input and one of another: the first input's join
    into one chunk (in time order, its pauses cut out), up to 30 s of audio, the other
    input's stay apart; a packed decode's words go back to the stretch each starts in."""
    s = SAMPLE_RATE
    first = Chunk(0, 30 * s).between(10 * s, 12 * s)
    tail = Chunk(0, 30 * s).between(27 * s, 30 * s)
    second = Chunk(30 * s, 60 * s).between(31 * s, 33 * s)
    other = Chunk(0, 30 * s, source=1).between(5 * s, 7 * s)
    long = Chunk(60 * s, 90 * s).between(61 * s, 89 * s)
    packs = packed([(1, second), (0, tail), (0, first), (2, long), (0, other)])
    assert [[(n, part.start) for n, part in members] for members, _ in packs] == [
        [(0, 10 * s), (0, 27 * s), (1, 31 * s)],  # 7 s
        [(2, 61 * s)],  # 28 s more would pass 30 s
        [(0, 5 * s)],  # another input
    ]
    joined = packs[0][1]
    assert joined.reread and joined.spans == (
        (10 * s, 12 * s),
        (27 * s, 30 * s),
        (31 * s, 33 * s),
    )
    assert joined.seconds == 7.0 and packs[2][1].source == 1

    decode = _words_at((10.2, 11.0), (11.1, 11.8), (27.5, 29.0), (31.2, 32.5))
    assert [len(decode.within(part).words) for part in (first, tail, second)] == [2, 1, 1]
    assert decode.within(second).tokens == [400]


def _said(start: float, end: float, word: str) -> list[TimedWord]:
    """`word` said every 0.5 s from `start` to `end`."""
    count = round((end - start) / 0.5)
    return [
        TimedWord(start + 0.5 * n, start + 0.5 * n + 0.4, f" {word}", 0.9, (500,))
        for n in range(count)
    ]


def _decode_of(*words: list[TimedWord]) -> AlignedChunk:
    said = tuple(w for run in words for w in run)
    return AlignedChunk([t for w in said for t in w.tokens], -0.2, 0.01, words=said)


def test_the_stretches_after_where_a_packs_decode_stopped_are_read_again_alone():
    """A chunk's decode skips 3.9-8 s and 9.9-20 s; the two stretches share a window, and its
    decode stops after the first (as Whisper did with the joined real clips' JFK sentence
    under MKL, tests/test_batched.py). The second is read again on its own, and its words
    come back after their chunk; read alone and saying nothing, it stays silent. A pack
    that says nothing at all was judged silent, as a chunk is: nothing is read again."""
    s = SAMPLE_RATE
    chunk = Chunk(0, 24 * s, speech_end=23 * s)
    asked: list[list[tuple[float, float]]] = []
    answers = {
        (0, 24): _decode_of(_said(0, 4, "one"), _said(8, 10, "two"), _said(20, 23, "three")),
        (3.9, 20.0): _decode_of(_said(4, 8, "four")),  # the pack: nothing from 10 s on
        (9.9, 20.0): _decode_of(_said(10, 20, "five")),
    }

    def decode(chunks: list[Chunk], _rereads=None) -> list[AlignedChunk]:
        spans = [(c.start / s, c.end / s) for c in chunks]
        asked.append(spans)
        return [answers.get(span, AlignedChunk([], -0.2, 0.9)) for span in spans]

    decoded = [piece for _, pieces in decode_chunks([chunk], [[0]], decode) for piece in pieces]
    pieces = [(part.start / s, part.end / s, len(result.words)) for part, result in decoded]
    assert asked == [[(0, 24)], [(3.9, 20)], [(9.9, 20)]]
    assert pieces == [(0, 24, 18), (3.9, 8, 8), (9.9, 20, 20)]
    del answers[(9.9, 20.0)]  # the stretch says nothing alone either: read once, no more
    asked.clear()
    [(_, pieces)] = decode_chunks([chunk], [[0]], decode)
    assert len(pieces) == 2
    assert asked == [[(0, 24)], [(3.9, 20)], [(9.9, 20)]]
    del answers[(3.9, 20.0)]  # the pack says nothing: silence, as it judged
    asked.clear()
    [(_, pieces)] = decode_chunks([chunk], [[0]], decode)
    assert len(pieces) == 1
    assert asked == [[(0, 24)], [(3.9, 20)]]


def test_what_the_last_round_leaves_unread_is_handed_on_not_dropped(monkeypatch):
    """The decode above, with one round of rereads: the pack's decode stops after its first
    stretch, and no round is left to read the second (9.9-20 s) alone. It goes to `unread`
    (the report counts it as speech not transcribed); with a round left, it is read and
    nothing goes there."""
    from kvscribe import rereads

    s = SAMPLE_RATE
    chunk = Chunk(0, 24 * s, speech_end=23 * s)
    answers = {
        (0, 24): _decode_of(_said(0, 4, "one"), _said(8, 10, "two"), _said(20, 23, "three")),
        (3.9, 20.0): _decode_of(_said(4, 8, "four")),
        (9.9, 20.0): _decode_of(_said(10, 20, "five")),
    }

    def decode(chunks: list[Chunk], _rereads=None) -> list[AlignedChunk]:
        return [answers[(c.start / s, c.end / s)] for c in chunks]

    for rounds, expected in [(1, [(9.9, 20.0, 10.1)]), (2, [])]:
        monkeypatch.setattr(rereads, "MAX_TAIL_ROUNDS", rounds)
        left: list[Chunk] = []
        list(decode_chunks([chunk], [[0]], decode, left.append))
        assert [(p.start / s, p.end / s, round(p.speech_seconds, 1)) for p in left] == expected


def test_a_word_beside_a_stretch_heard_again_at_its_edge_is_dropped_from_its_decode():
    """Alignment started "Please" of "Please enter" late (10.28 s), so the stretch before it
    held the word's first sound, and its decode ended "Please," again (a telephone
    recording: "3D audio enabled. Please, Please enter..."). That echo is dropped, at
    either edge; a word that does not reach the edge, or is another word, stays."""
    s = SAMPLE_RATE
    chunk = Chunk(0, 30 * s)
    around = AlignedChunk(
        [1, 2, 3],
        -0.2,
        0.01,
        words=(
            TimedWord(6.8, 8.86, " enabled.", 0.9, (1,)),
            TimedWord(10.28, 10.6, " Please", 0.9, (2,)),
            TimedWord(10.6, 11.0, " enter", 0.9, (3,)),
        ),
    )
    part = chunk.between(round(8.86 * s), round(10.28 * s))

    def decoded(*words: tuple[float, float, str]) -> AlignedChunk:
        timed = tuple(TimedWord(a, b, w, 0.9, (n,)) for n, (a, b, w) in enumerate(words, 10))
        return AlignedChunk([w.tokens[0] for w in timed], -0.2, 0.01, words=timed)

    echo = decoded((9.0, 9.4, " yes"), (9.62, 10.24, " Please,"))
    assert [w.word for w in echo.without_echoes(part, around).words] == [" yes"]
    assert echo.without_echoes(part, around).tokens == [10]
    early = decoded((9.0, 9.4, " yes"), (9.5, 9.8, " please"))  # ends 0.48 s before the edge
    assert early.without_echoes(part, around) == early
    other = decoded((9.62, 10.24, " Pleased"))
    assert other.without_echoes(part, around) == other
    first = decoded((8.9, 9.1, " enabled"), (9.3, 9.9, " now"))
    assert [w.word for w in first.without_echoes(part, around).words] == [" now"]


def test_a_stretch_read_again_gets_one_attempt_and_its_chunk_every_temperature():
    """Both rows fail the logprob test at every temperature: the chunk's row is sampled at
    each one, the re-read stretch's is not (kvscribe.decoding.per_row's `once`)."""
    fallback = Fallback(temperatures=(0.0, 0.2, 0.4, 0.6))
    asked: list[tuple[list[int], float]] = []

    def decode(rows: list[int], _round: int, temperature: float) -> list[AlignedChunk]:
        asked.append((rows, temperature))
        return [AlignedChunk([1, 2], -2.0, 0.1, temperature=temperature) for _ in rows]

    kept = per_row(fallback, 2, decode, once=[False, True])
    assert asked == [([0, 1], 0.0), ([0], 0.2), ([0], 0.4), ([0], 0.6)]
    assert kept[1].temperature == 0.0
    assert per_row(fallback, 2, decode)  # without `once`, both rows go on
    assert asked[-3:] == [([0, 1], 0.2), ([0, 1], 0.4), ([0, 1], 0.6)]


def test_a_stretch_read_again_loses_only_the_made_up_words_it_starts_with():
    """The Spanish telephone recording's lost phrase (docs/long-files.md): the stretch read
    again from inside a word began "el siete" at p 0.07 and 0.08, the second aligned 0 s
    long, which openai-whisper's anomaly test scores made up together; "siete" and the nine
    words after it were heard. The leading words are dropped until the test passes: "el"
    alone, the rest kept with their tokens. Past two such words, or made up throughout, or
    squeezed past any speaking rate, or punctuation alone, a decode is dropped whole; a
    plausible one is kept as it is."""
    heard = ["o", "nueve", "para", "bajar", "o", "subir", "su", "propio", "volumen"]
    first = [
        TimedWord(41.0, 41.34, " el", 0.07, (10,)),
        TimedWord(41.34, 41.34, " siete", 0.08, (11,)),
    ]
    rest = [
        TimedWord(41.4 + 0.4 * n, 41.7 + 0.4 * n, f" {word}", 0.9, (100 + n,))
        for n, word in enumerate(heard)
    ]
    words = tuple(first + rest)
    piece = AlignedChunk([t for w in words for t in w.tokens], -0.3, 0.05, words=words)
    kept = piece.plausible_part()
    assert kept is not None
    assert [w.word.strip() for w in kept.words] == ["siete", *heard]
    assert kept.tokens == [11] + [100 + n for n in range(len(heard))]

    three_bad = tuple(TimedWord(40.5, 40.5, " y", 0.05, (9,)) for _ in range(3)) + words
    assert AlignedChunk([1], -0.3, 0.05, words=three_bad).plausible_part() is None
    made_up = tuple(TimedWord(w.start, w.end, w.word, 0.05, w.tokens) for w in words)
    assert AlignedChunk([1], -0.3, 0.05, words=made_up).plausible_part() is None
    squeezed = tuple(TimedWord(50 + 0.05 * n, 50.04 + 0.05 * n, " a", 0.9) for n in range(6))
    assert AlignedChunk([1], -0.3, 0.05, words=squeezed).plausible_part() is None
    plain = AlignedChunk(list(piece.tokens[2:]), -0.3, 0.05, words=tuple(rest))
    assert plain.plausible_part() is plain
    dots = (TimedWord(60.0, 61.2, "...", 0.6, (1399,)),)  # a stretch of noise read again
    assert AlignedChunk([1399], -0.3, 0.05, words=dots).plausible_part() is None
