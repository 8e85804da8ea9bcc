"""A batch's rows encoded by the replicas that decode them (group_encoding.SpreadRows): an odd
row's encoding goes to the replica with less work, and a share decodes once all its rows
are encoded, wherever."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from kvscribe.audio import load_audio
from kvscribe.backends.ctranslate2.group_encoding import ENCODE_WEIGHT, EncodedAhead, SpreadRows
from kvscribe.backends.ctranslate2.replicas import Replicas
from kvscribe.chunking import ChunkRules, speech_chunks

JFK = Path(__file__).resolve().parent.parent / "samples" / "jfk.wav"


def _planned(seconds: list[float], workers: int = 2, ahead: EncodedAhead | None = None):
    """The shares and encoding queues of rows of these seconds (the rows' chunks are only
    names here: nothing is encoded)."""
    rows = SpreadRows(None, None, (), [f"chunk {n}" for n in range(len(seconds))], ahead)
    shares = Replicas(None, None, workers).shares(len(seconds), rows.weights(seconds))
    return shares, rows.queues(shares, seconds)


def _loads(shares, queues, seconds) -> list[float]:
    return [
        sum(seconds[row] for row in share) + ENCODE_WEIGHT * len(queue)
        for share, queue in zip(shares, queues, strict=True)
    ]


def test_an_odd_rows_encoding_goes_to_the_replica_with_less_work():
    """Seven rows of 26 s on two replicas (the espeak recording's batch): dealt 4 and 3
    whole, two of the four's encodings move to the other replica, first in its queue."""
    seconds = [26.0] * 7
    shares, queues = _planned(seconds)
    heavy, light = sorted(range(2), key=lambda n: -len(shares[n]))
    assert [len(shares[heavy]), len(shares[light])] == [4, 3]
    assert sorted(row for queue in queues for row in queue) == list(range(7))  # each once
    moved = [row for row in queues[light] if row in shares[heavy]]
    assert len(moved) == 2 and queues[light][:2] == moved  # first: the heavy share waits
    assert set(queues[light][2:]) == set(shares[light])
    assert set(queues[heavy]) == set(shares[heavy]) - set(moved)
    unmoved = [[row for row in share] for share in shares]
    assert max(_loads(shares, queues, seconds)) < max(_loads(shares, unmoved, seconds))


def test_no_more_encodes_move_than_the_heavier_share_keeps():
    """Five rows, dealt 3 and 2: moving two of the three's encodes would leave its replica
    one of its own and two to wait for, encoded after each other on the other replica."""
    seconds = [26.0] * 5
    shares, queues = _planned(seconds)
    heavy, light = sorted(range(2), key=lambda n: -len(shares[n]))
    moved = [row for row in queues[light] if row in shares[heavy]]
    assert len(moved) == 1 and len(queues[heavy]) == 2
    assert queues[light][0] == moved[0]


@pytest.mark.parametrize(
    "seconds",
    [[26.0] * 6, [29.8, 25.3, 28.3, 22.9, 10.6, 28.2]],
    ids=["even", "the French batch's six"],
)
def test_shares_as_even_as_a_move_can_make_them_encode_their_own_rows(seconds):
    shares, queues = _planned(seconds)
    loads = _loads(shares, queues, seconds)
    assert max(loads) - min(loads) <= ENCODE_WEIGHT
    assert [set(queue) for queue in queues] == [set(share) for share in shares]


@pytest.mark.parametrize(("rows", "workers"), [(11, 4), (9, 4), (13, 8), (3, 2)])
def test_on_more_replicas_every_row_is_encoded_once_and_no_replica_waits(rows, workers):
    """Whatever the shares, each row is in one queue, a replica's moved-out encodes are no
    more than those it keeps, moved rows come first, and no load grows past the heaviest."""
    seconds = [float(20 + 3 * (row % 4)) for row in range(rows)]
    shares, queues = _planned(seconds, workers)
    assert sorted(row for queue in queues for row in queue) == list(range(rows))
    owner = {row: number for number, share in enumerate(shares) for row in share}
    for number, queue in enumerate(queues):
        foreign = [row for row in queue if owner[row] != number]
        assert queue[: len(foreign)] == foreign
        kept = sum(owner[row] == number for row in queue)
        assert sum(owner[row] == number for q in queues for row in q if q is not queue) <= kept
    unmoved = [list(share) for share in shares]
    assert max(_loads(shares, queues, seconds)) <= max(_loads(shares, unmoved, seconds))


def test_a_row_kept_ahead_is_encoded_by_no_replica():
    ahead = EncodedAhead(limit=1)
    ahead.keep("chunk 0", np.zeros((1, 1500, 384), np.float32))
    _, queues = _planned([26.0] * 5, ahead=ahead)
    assert sorted(row for queue in queues for row in queue) == [1, 2, 3, 4]


@pytest.mark.model
def test_a_share_waits_for_a_row_another_replica_encodes_and_hears_its_failure(ct2_backend):
    """Two rows of JFK on onnxruntime's one-thread session: a replica that encoded its
    own row waits for the one the other replica encodes and then reads both (the same
    window, so the same output); a replica waiting on one that failed raises, not hangs."""
    from kvscribe.backends.ctranslate2.encoder import OnnxEncoder, cached_graph

    model = ct2_backend.model
    encoder = OnnxEncoder(cached_graph(model.path, model.name, "int8"), 1, "int8")
    audio = load_audio(JFK)
    chunk = speech_chunks(audio, ChunkRules(cut_pauses=True))[0]
    rows = SpreadRows(encoder, ct2_backend.engine, (audio,), [chunk, chunk], None)
    own_done, read, errors = threading.Event(), [], []

    def replica() -> None:
        try:
            rows.encode([0])
            own_done.set()
            rows.wait_for([0, 1])
            read.append(np.asarray(rows.of([0, 1])))  # fails on a row not encoded yet
        except BaseException as exc:
            errors.append(exc)

    waiting = threading.Thread(target=replica, daemon=True)
    waiting.start()
    assert own_done.wait(120)
    rows.encode([1])
    waiting.join(120)
    assert not errors and len(read) == 1
    assert np.array_equal(read[0][0], read[0][1])

    stopped = SpreadRows(encoder, ct2_backend.engine, (audio,), [chunk], None)
    waiting = threading.Thread(
        target=_waits_and_keeps_its_error, args=(stopped, errors), daemon=True
    )
    waiting.start()
    stopped.fail(ValueError("the other replica's encoder stopped"))
    waiting.join(30)
    assert not waiting.is_alive()
    assert isinstance(errors[0], RuntimeError)
    assert isinstance(errors[0].__cause__, ValueError)


def _waits_and_keeps_its_error(rows: SpreadRows, errors: list) -> None:
    try:
        rows.wait_for([0])
    except RuntimeError as exc:
        errors.append(exc)
