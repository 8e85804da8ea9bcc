"""The word aligner's arithmetic (kvscribe/stepped/alignment.py, numpy only, shared by the
transformers and onnx backends): row-vectorised DTW against the textbook recurrence
openai-whisper runs, and the reflect-padded median filter."""

from __future__ import annotations

import numpy as np
import pytest

from kvscribe.stepped.alignment import dtw, median_filter


def _plain_dtw(cost: np.ndarray) -> list[tuple[int, int]]:
    """The textbook recurrence, one cell at a time, as openai-whisper's dtw_cpu runs it."""
    rows, columns = cost.shape
    total = np.full((rows + 1, columns + 1), np.inf)
    total[0, 0] = 0
    came = np.zeros((rows + 1, columns + 1), dtype=int)
    for j in range(1, columns + 1):
        for i in range(1, rows + 1):
            c0, c1, c2 = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
            if c0 < c1 and c0 < c2:
                best, came[i, j] = c0, 0
            elif c1 < c0 and c1 < c2:
                best, came[i, j] = c1, 1
            else:
                best, came[i, j] = c2, 2
            total[i, j] = cost[i - 1, j - 1] + best
    came[0, :], came[:, 0] = 2, 1
    i, j, path = rows, columns, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        i, j = (i - 1, j - 1) if came[i, j] == 0 else (i - 1, j) if came[i, j] == 1 else (i, j - 1)
    return path[::-1]


@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (6, 1), (5, 40), (23, 300), (40, 750)])
def test_row_vectorised_dtw_takes_the_plain_recurrence_s_path(shape):
    cost = np.random.default_rng(sum(shape)).normal(size=shape)
    rows, columns = dtw(cost)
    assert list(zip(rows.tolist(), columns.tolist(), strict=True)) == _plain_dtw(cost)


def test_dtw_follows_a_planted_diagonal_band():
    cost = np.ones((4, 12))
    for row, (first, last) in enumerate([(0, 2), (3, 5), (6, 8), (9, 11)]):
        cost[row, first : last + 1] = -1.0
    rows, columns = dtw(cost)
    starts = columns[np.diff(rows, prepend=-1).astype(bool)]
    assert starts.tolist() == [0, 3, 6, 9]


@pytest.mark.parametrize("width", [3, 5, 7, 9])
@pytest.mark.parametrize("values", ["normal", "ties"])
def test_median_filter_is_a_reflect_padded_sliding_median(width, values):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(3, 5, 40)) if values == "normal" else rng.integers(0, 3, (3, 5, 40))
    x = x.astype(np.float32)
    pad = width // 2
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad)), mode="reflect")
    windows = [padded[..., k : k + width] for k in range(40)]
    expected = np.stack([np.median(window, axis=-1) for window in windows], -1)
    assert np.array_equal(median_filter(x, width), expected)
    short = x[..., :pad]  # too short to pad: unchanged
    assert np.array_equal(median_filter(short, width), short)


def test_the_median_of_7_network_selects_the_median_of_every_0_1_input():
    """By the 0-1 principle a compare-exchange network that selects the median of every
    input of zeros and ones selects the median of any input."""
    import itertools

    inputs = np.array(list(itertools.product([0.0, 1.0], repeat=7)), dtype=np.float32)
    # Frame 3 of a 7-frame row sees exactly the row's 7 values (no padding reaches it).
    assert np.array_equal(median_filter(inputs, 7)[:, 3], np.median(inputs, axis=-1))
