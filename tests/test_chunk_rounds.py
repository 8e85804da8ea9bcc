"""A file's batched chunks dealt into lanes, each chunk prompted with the text decoded before
it (kvscribe/chunk_rounds.py, kvscribe/aligned_chunks.py's driver), and the prompts
reaching CTranslate2 (backends/ctranslate2/batched.py)."""

from __future__ import annotations

import json

import pytest

from kvscribe import chunk_rounds
from kvscribe.aligned_chunks import AlignedChunk, decoded_segments
from kvscribe.audio import SAMPLE_RATE
from kvscribe.chunking import Chunk
from kvscribe.decoding import PROMPT_MAX, Fallback
from kvscribe.timing.timed_words import TimedWord
from kvscribe.types import Segment
from tests.conftest import run_cli


@pytest.mark.parametrize("batch", [1, 2, 3, 8, 16])
def test_lanes_take_the_rounds_order_takes_and_follow_a_decoded_chunk(batch):
    for count in range(0, 70):
        rounds = chunk_rounds.in_lanes(count, batch)
        dealt = [number for numbers in rounds for number in numbers]
        assert sorted(dealt) == list(range(count))  # every chunk once
        assert len(rounds) == len(chunk_rounds.in_order(count, batch))
        assert all(0 < len(numbers) <= batch for numbers in rounds)
        round_of = {number: r for r, numbers in enumerate(rounds) for number in numbers}
        span = batch * chunk_rounds.SPAN_ROUNDS
        for first in range(0, count, span):
            size = min(span, count - first)
            # every chunk of a span after its lanes' first ones follows one decoded before
            follows = [n for n in range(first + 1, first + size) if round_of[n - 1] < round_of[n]]
            depth = -(-size // batch)
            assert len(follows) >= size - -(-size // depth)


def test_eleven_chunks_at_batch_eight_take_two_rounds_of_lanes():
    assert chunk_rounds.in_lanes(11, 8) == [[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9]]
    assert chunk_rounds.in_lanes(8, 8) == [list(range(8))]  # one round: nothing to follow
    assert chunk_rounds.in_order(11, 8) == [list(range(8)), [8, 9, 10]]


def _segment(tokens, temperature=0.0) -> Segment:
    return Segment(0, 0.0, 1.0, "x", tuple(tokens), temperature=temperature)


def test_the_text_before_a_chunk_is_what_was_decoded_right_before_it():
    chunks = [Chunk(n * SAMPLE_RATE, (n + 1) * SAMPLE_RATE) for n in range(6)]
    found = {0: [_segment([1, 2])], 1: [_segment([3]), _segment([4])], 2: [], 4: [_segment([9])]}
    assert chunk_rounds.text_before(3, chunks, found) == [1, 2, 3, 4]  # chunk 2 said nothing
    assert chunk_rounds.text_before(5, chunks, found) == [9]  # chunk 3 is not decoded yet
    assert chunk_rounds.text_before(0, chunks, found) == []
    found[1] = [_segment([3], temperature=0.6), _segment([4])]  # faster-whisper's reset
    assert chunk_rounds.text_before(3, chunks, found) == [4]
    other = [Chunk(0, SAMPLE_RATE), Chunk(SAMPLE_RATE, 2 * SAMPLE_RATE, source=1)]
    assert chunk_rounds.text_before(1, other, {0: [_segment([5])]}) == []  # another input
    found = {0: [_segment(range(400))], 1: [_segment([7])]}
    before = chunk_rounds.text_before(2, chunks, found)
    assert len(before) == PROMPT_MAX and before[-1] == 7


def _spoken(chunk: Chunk, token: int) -> AlignedChunk:
    """`token` said every 0.5 s through the chunk: nothing left to read again."""
    start = chunk.start / SAMPLE_RATE
    count = round(chunk.seconds / 0.5)
    words = tuple(
        TimedWord(start + 0.5 * n, start + 0.5 * n + 0.4, " w", 0.9, (token,)) for n in range(count)
    )
    return AlignedChunk([token] * count, -0.2, 0.01, words=words)


@pytest.mark.parametrize("prompted", [True, False])
def test_the_driver_prompts_each_chunk_with_the_text_decoded_before_it(prompted):
    """Five chunks at batch 2, each saying its own number: in lanes [0 1 2] and [3 4] the
    rounds are [0 3], [1 4], [2]; chunk 1 is prompted with chunk 0's text, 4 with 3's, 2
    with 0's and 1's. Unprompted, they go in order with no previous text asked for. Either
    way the segments come out in time order."""
    chunks = [Chunk(n * 4 * SAMPLE_RATE, (n * 4 + 3) * SAMPLE_RATE) for n in range(5)]
    asked = []

    def decode_group(group, rereads=None, **prompt):
        numbers = [chunks.index(chunk) for chunk in group]
        asked.append((numbers, prompt.get("previous")))
        return [_spoken(chunk, 100 + number) for chunk, number in zip(group, numbers, strict=True)]

    segments = list(
        decoded_segments(chunks, 2, decode_group, str, Fallback(), False, prompted=prompted)
    )
    said = [[100 + n] * 6 for n in range(5)]
    if prompted:
        assert asked == [
            ([0, 3], [[], []]),
            ([1, 4], [said[0], said[3]]),
            ([2], [said[0] + said[1]]),
        ]
    else:
        assert asked == [([0, 1], None), ([2, 3], None), ([4], None)]
    assert [segment.tokens[0] for segment in segments] == [100, 101, 102, 103, 104]
    assert [segment.id for segment in segments] == list(range(5))


@pytest.mark.slow
def test_a_file_of_more_chunks_than_a_batch_prompts_its_later_chunks(tmp_path, long_form_head):
    """The long-form head's three speech chunks at batch 2 take two rounds: the chunk after
    the first lane's first is decoded with its text as the prompt (the stats say how many,
    counted from the prompts CTranslate2 was given), and the text stays the clip's; with
    --no-condition-on-previous-text nothing is prompted."""
    from kvscribe.bench.wer import pooled_wer

    reference = long_form_head.with_suffix(".txt").read_text(encoding="utf-8")
    rows = {}
    for flag in ("--condition-on-previous-text", "--no-condition-on-previous-text"):
        stats = tmp_path / f"{flag}.json"
        # Greedy: the prompts are the question, not the search (one generate call either way)
        settings = ("--batch-size", "2", "--beam-size", "1", flag, "-f", "txt", "-q")
        result = run_cli(long_form_head, *settings, "--stats-json", stats)
        assert result.code == 0, result.stderr
        figures = json.loads(stats.read_text())
        rows[flag] = figures["settings"]["previous-text prompt"]
        assert pooled_wer([(reference, result.stdout)]) < 0.1, (flag, result.stdout)
    assert rows == {
        "--condition-on-previous-text": "1 of 3 chunks (batched in lanes)",
        "--no-condition-on-previous-text": "off (batched)",
    }


def test_one_generate_call_takes_its_rows_previous_text_cut_to_the_shortest():
    """CTranslate2 takes a batch's prompts of one length only: each row keeps as many of
    its last previous tokens as the row with fewest, after the hotwords and before the sot
    sequence; where one row has none, every row gets the request's prompt."""
    from kvscribe.backends.ctranslate2 import batched as ct2_batched
    from kvscribe.backends.ctranslate2.generate import row_prompts
    from kvscribe.backends.ctranslate2.replicas import Replicas
    from kvscribe.contract import DecodeRequest
    from tests.loaded import backend

    engine = backend("ctranslate2").engine
    request = DecodeRequest(hotwords="Kennedy")
    plan, tokenizer = ct2_batched.setup(engine, "en", request, 5, 8, Replicas(engine, engine, 1))
    one, two = tokenizer.encode(" ask not what"), tokenizer.encode(" my fellow Americans")
    prompts = row_prompts(plan, [one, two], 2)
    shortest = min(len(one), len(two))
    assert len(prompts[0]) == len(prompts[1]) == len(plan.prompt) + shortest
    hotwords = tokenizer.encode(" Kennedy")
    for prompt, previous in zip(prompts, (one, two), strict=True):
        assert prompt[0] == tokenizer.sot_prev and prompt[1 : 1 + len(hotwords)] == hotwords
        after = 1 + len(hotwords)
        assert prompt[after : after + shortest] == previous[-shortest:]
        assert prompt[after + shortest :] == plan.prompt[after:]  # sot sequence
    assert row_prompts(plan, [one, []], 2) == [plan.prompt, plan.prompt]
    assert row_prompts(plan, None, 3) == [plan.prompt] * 3
