"""The bench's baseline cells: faster-whisper called directly, as kvscribe's cells report."""

from __future__ import annotations

import pytest

from kvscribe.bench.cells import Cell
from kvscribe.bench.clips import shipped


@pytest.mark.slow
@pytest.mark.model
def test_faster_whisper_batched_cell_reports_the_batch_it_ran():
    """The pipeline cell batches a clip over one window at the profile's batch size, and
    a clip of one window not at all, as the kvscribe cell it mirrors reports it."""
    from kvscribe.bench.worker import _FasterWhisperBatched

    cell = Cell("faster-whisper-batched", "ctranslate2", None, "cpu-laptop")
    pipeline = _FasterWhisperBatched(cell, "cpu")
    short, long = shipped()
    assert pipeline(short).batch_size == 1
    run = pipeline(long)
    assert run.batch_size == pipeline.batch == 8 and run.text.strip()
