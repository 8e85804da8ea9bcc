"""RSS sampling and heap trimming over a run (kvscribe/machine/memtrace.py), on this process."""

from __future__ import annotations

import pytest

from kvscribe.machine import memtrace
from kvscribe.machine.memtrace import HeapTrimmer, MemoryTrace, current_rss_bytes

needs_glibc = pytest.mark.skipif(
    memtrace._malloc_trim() is None, reason="malloc_trim is glibc's (Linux)"
)


def _freed_heap_blocks() -> list[bytearray]:
    """About 190 MB in 64 kB blocks (under glibc's mmap threshold: on the heap), all freed
    but every 100th, which pins the heap so glibc cannot give the rest back by itself."""
    blocks = [bytearray(64_000) for _ in range(3000)]
    return blocks[::100]


@needs_glibc
def test_freed_heap_pages_go_back_to_the_os_once_a_minute_of_audio():
    kept = _freed_heap_blocks()
    trimmer = HeapTrimmer(every=60.0)
    held = current_rss_bytes()
    trimmer.reached(59.9)  # not yet due
    assert current_rss_bytes() > held - 20e6
    trimmer.reached(60.0)
    assert current_rss_bytes() < held - 100e6
    assert kept[0][0] == 0  # the pinned blocks are still there


def test_samples_are_thinned_but_keep_the_start_and_span():
    trace = MemoryTrace(every=1.0)
    for second in range(2 * memtrace.MAX_SAMPLES):
        trace.sample(float(second))
    assert len(trace.samples) <= memtrace.MAX_SAMPLES
    assert trace.samples[0][0] == 0.0 and trace.samples[-1][0] >= 2 * memtrace.MAX_SAMPLES - 2
