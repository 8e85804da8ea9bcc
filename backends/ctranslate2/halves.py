"""`--batch-size 1` on a CPU with single-thread replicas: a long input decoded as two halves
side by side.

faster-whisper's sequential transcribe decodes one window after another, and each window's
beam search runs on one single-thread replica (backends/ctranslate2/replicas.py), so on 2
cores the other core waits through most of a run (cores busy 56-63 %,
benchmarks/results/longform_peers_today_avx512.md). Cut at the quietest stretch near its
middle, the input is decoded as two sequential transcribes at once, one per replica, each
window still prompted with the text before it; only the second half's first window has no
text before it, as the first window of a file of its own has none. The second half's
segments are held until the first half's are out, so they come in time order.

A window that falls back to sampling is decoded on a load of its own
(backends/ctranslate2/sampling.py), so neither half's samples depend on how the two
happen to interleave.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from kvscribe import setting_rows as row
from kvscribe import worker_threads
from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import PEAK_FRAME, Joined, Samples, StreamedAudio, frame_peaks
from kvscribe.backends.ctranslate2 import stream as ct2_stream
from kvscribe.backends.ctranslate2 import stretched

MIN_SECONDS = 30.0  # what fits one window stays whole
PAUSE_SECONDS = 0.5  # the stretch whose mean loudness finds the cut
MIDDLE = (0.4, 0.6)  # where the cut is looked for, as fractions of the input
# A pause at most this much louder than the quietest is as good a place to cut. The first
# quietest one had put the cut at 40.6-40.7 % of the espeak and the noisy telephone
# recordings (of two silent pauses, the earlier; over a noise floor, one a little
# quieter), and the longer second half ran on alone: 75 % of the cores busy on the noisy one.
QUIET_ENOUGH = 1.5
# And a pause under this fraction of the speech's level (the SPEECH_PERCENTILE of the 10 ms
# peaks) is as quiet as one of digital silence: where utterances joined with a trace of
# digital silence left between them, the quietest pause was near zero, none of the pauses
# of an ordinary quiet room came within 1.5x of it, and the cut of the telephone
# recording fell at 43 % (49 % now; its first half had run 5 windows, its second 7).
SILENT_ENOUGH = 0.02
SPEECH_PERCENTILE = 95


def cut(samples: Samples) -> int | None:
    """The middle of the pause nearest the input's middle, of those in its MIDDLE about as
    quiet as the quietest (QUIET_ENOUGH, SILENT_ENOUGH; a pause's loudness: the mean of the
    10 ms peaks over PAUSE_SECONDS), on a 10 ms frame: the halves as even as a pause allows.
    None when it is too short to halve, or cannot be read from two threads."""
    if samples.size < MIN_SECONDS * SAMPLE_RATE or not _two_readers(samples):
        return None
    peaks = _peaks(samples).astype(np.float64)
    width = int(PAUSE_SECONDS * SAMPLE_RATE / PEAK_FRAME)
    low, high = (int(fraction * peaks.size) for fraction in MIDDLE)
    middle_peaks = peaks[low : high + width]
    sums = np.convolve(middle_peaks, np.ones(width), mode="valid")
    silent = SILENT_ENOUGH * np.percentile(middle_peaks, SPEECH_PERCENTILE) * width
    quiet = np.flatnonzero(sums <= max(sums.min(), silent) * QUIET_ENOUGH)
    runs = np.split(quiet, np.flatnonzero(np.diff(quiet) > 1) + 1)  # one run a pause
    centres = np.array([(run[0] + run[-1]) // 2 for run in runs])
    middle = peaks.size // 2 - width // 2 - low  # where a pause centred on the middle starts
    chosen = low + int(centres[np.argmin(np.abs(centres - middle))])
    return (chosen + width // 2) * PEAK_FRAME


def _peaks(samples: Samples) -> np.ndarray:
    """frame_peaks of `samples`; of parts joined, the peak of the source's frame where each
    of their frames starts (near enough to find a pause): reading the parts of a file too
    long to hold would decode it once more."""
    if isinstance(samples, Joined):
        source = _peaks(samples.source)
        starts = samples.source_positions(np.arange(0, samples.size, PEAK_FRAME, dtype=np.int64))
        return source[np.minimum(starts // PEAK_FRAME, source.size - 1)]
    return frame_peaks(samples)


def _two_readers(samples: Samples) -> bool:
    """Whether a second thread can read `samples` beside the first: arrays and files can (a
    file too long to hold through a reader of its own: `second_reader`), and so can their
    parts joined (digital silence or a VAD filter's pauses cut out)."""
    if isinstance(samples, Joined):
        return _two_readers(samples.source)
    return isinstance(samples, np.ndarray | StreamedAudio)


def second_reader(samples: Samples) -> Samples:
    """`samples` for a second thread: the same arrays, a held file and parts of them; a file
    too long to hold, with a decoder of its own (StreamedAudio.twin; close it with
    `close_second`)."""
    if isinstance(samples, Joined):
        return Joined(second_reader(samples.source), samples.regions)
    if isinstance(samples, StreamedAudio) and not samples.held:
        return samples.twin()
    return samples


def close_second(samples: Samples, second: Samples) -> None:
    """Close the file reader second_reader(`samples`) opened, if it opened one."""
    while isinstance(samples, Joined) and isinstance(second, Joined):
        samples, second = samples.source, second.source
    if second is not samples and isinstance(second, StreamedAudio):
        second.close()


def halves(samples: Samples, at: int) -> tuple[Samples, Samples]:
    """`samples` before and from `at`, each readable from its own thread (the second through
    second_reader)."""
    return Joined(samples, [(0, at)]), Joined(second_reader(samples), [(at, samples.size)])


@dataclass(frozen=True)
class HalfEngines:
    """`first`: the one-row engine of the first half; `second()`: the second's, made on its
    own thread when it starts."""

    first: object
    second: Callable[[], object]


def transcribe(
    engines: HalfEngines,
    decoded: Samples,
    at: int,
    options: dict,
    report,
    threads: int,
    rereads: stretched.Rereads | None,
):
    """faster-whisper's (segments, info) of `decoded` cut at `at`, its halves decoded at once:
    the first on `engines.first`, the second on `engines.second` in the first's language
    (HalfEngines), each half's stretched words read again on its own engine
    (stretched.transcribe); the stats' engine-threads row says where it cut."""
    first, second = halves(decoded, at)
    raw, info = stretched.transcribe(engines.first, first, options, rereads)

    def second_half() -> Iterator:
        try:
            segments, _ = stretched.transcribe(
                engines.second(), second, options | {"language": info.language}, rereads
            )
            yield from ct2_stream.shifted(segments, at)
        finally:
            close_second(decoded, second.source)  # a long file's second reader

    report.settings[row.ENGINE_THREADS] = (
        f"{threads} (two halves side by side, cut at a pause {at / SAMPLE_RATE:.1f} s into "
        f"the audio decoded; each beam search on 1 of {threads} single-thread replicas)"
    )
    return side_by_side(raw, second_half), info


_END = object()


def side_by_side(first: Iterator, second: Callable[[], Iterator]) -> Iterator:
    """`first`'s items, then `second()`'s, the second produced on a thread of its own from
    the start. Its error, if any, is raised where its items would have come; a consumer
    that stops early stops it after the item it is on."""
    ahead = _Ahead(second)
    try:
        yield from first
        yield from ahead
    finally:
        ahead.stop()


class _Ahead:
    """An iterator consumed on a thread of its own, its items queued for the caller."""

    def __init__(self, make: Callable[[], Iterator]):
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(make,), name="kvscribe-second-half", daemon=True
        )
        self._thread.start()

    def _run(self, make: Callable[[], Iterator]) -> None:
        try:
            for item in make():
                if self._stopped.is_set():
                    return
                self._items.put((item, None))
        except BaseException as exc:  # handed to the consumer, raised there
            self._items.put((_END, exc))
            return
        self._items.put((_END, None))

    def __iter__(self) -> Iterator:
        while True:
            item, error = worker_threads.get(self._items)
            if error is not None:
                raise error
            if item is _END:
                return
            yield item

    def stop(self) -> None:
        """Stop after the item being made (at most one window's decode), and wait for it."""
        self._stopped.set()
        worker_threads.join(self._thread)
