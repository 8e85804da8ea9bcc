"""One time map for every path that decodes audio with parts cut out (silence under
`--vad-filter`, runs of digital silence, `--clip-timestamps` spans, the pauses cut out of
a batched chunk): the regions kept, in original samples, and how a time in the joined
signal goes back to the original clock. One join rule for segments and words."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from kvscribe.audio import SAMPLE_RATE
from kvscribe.types import Segment

# Whisper's segment times come in 20 ms steps and often lead the speech by a tenth of a
# second or two, so a segment reaching less than this across a join into the next region
# (or back into the previous one) holds no speech there: without this, its start landed
# at the end of the region before, and its span covered the silence cut out between.
JOIN_SLACK_SECONDS = 0.5


@dataclass(frozen=True)
class TimeMap:
    """Speech regions (start, end) in original samples, in order, not overlapping."""

    regions: tuple[tuple[int, int], ...]

    @cached_property
    def _filtered_starts(self) -> list[int]:
        """Where each region begins in the joined signal."""
        starts, total = [], 0
        for begin, end in self.regions:
            starts.append(total)
            total += end - begin
        return starts

    @property
    def kept_samples(self) -> int:
        return sum(end - begin for begin, end in self.regions)

    def original(self, seconds: float, is_end: bool = False) -> float:
        """A time in the filtered signal -> the same instant in the original audio. An end
        exactly on a join belongs to the region before it, a start to the one after."""
        if not self.regions:
            return seconds
        sample = seconds * SAMPLE_RATE
        index = self._region_of(sample, is_end)
        begin, end = self.regions[index]
        return min(begin + sample - self._filtered_starts[index], end) / SAMPLE_RATE

    def word_span(self, start: float, end: float) -> tuple[float, float]:
        """A word's (start, end) in the filtered signal -> the original clock, kept within
        the region that holds its middle (faster-whisper's rule): a word never spans a
        silence cut out, however far the alignment stretched it across the join."""
        if not self.regions:
            return start, end
        index = self._region_of((start + end) / 2 * SAMPLE_RATE, is_end=False)
        low, high = self._joined_span(index)
        start, end = min(max(start, low), high), min(max(end, low), high)
        offset = self.regions[index][0] / SAMPLE_RATE - low
        return start + offset, end + offset

    def _region_of(self, sample: float, is_end: bool) -> int:
        find = bisect.bisect_left if is_end else bisect.bisect_right
        return max(0, find(self._filtered_starts, sample) - 1)

    def _joined_span(self, index: int) -> tuple[float, float]:
        """Region `index`'s (start, end) in the filtered signal, in seconds."""
        begin, end = self.regions[index]
        at = self._filtered_starts[index]
        return at / SAMPLE_RATE, (at + end - begin) / SAMPLE_RATE

    def _kept_to_speech(self, start: float, end: float) -> tuple[float, float]:
        """(start, end) in the filtered signal, pulled off any region the segment only grazes:
        a segment reaching less than JOIN_SLACK_SECONDS across a join into a region starts
        (or ends) at that join, not inside the silence cut out there."""
        if not self.regions:
            return start, end
        first = self._region_of(start * SAMPLE_RATE, is_end=False)
        last = self._region_of(end * SAMPLE_RATE, is_end=True)
        while first < last and self._joined_span(first)[1] - start < JOIN_SLACK_SECONDS:
            first += 1
            start = self._joined_span(first)[0]
        while last > first and end - self._joined_span(last)[0] < JOIN_SLACK_SECONDS:
            last -= 1
            end = self._joined_span(last)[1]
        return start, end

    def segment(self, segment: Segment) -> Segment:
        words = tuple(
            dataclasses.replace(w, start=start, end=end)
            for w in segment.words
            for start, end in [self.word_span(w.start, w.end)]
        )
        start, end = self._kept_to_speech(segment.start, segment.end)
        start, end = self.original(start), self.original(end, is_end=True)
        if words:  # a segment spans its words, which are timed one by one
            start, end = min(start, words[0].start), max(end, words[-1].end)
        return dataclasses.replace(segment, start=start, end=end, words=words)

    def segments(self, segments: Iterator[Segment]) -> Iterator[Segment]:
        for segment in segments:
            yield self.segment(segment)


def within_audio(segments: Iterator[Segment], seconds: float) -> Iterator[Segment]:
    """`segments` with no time past the audio's end: Whisper's last timestamp token can
    overshoot it (a 1.1 s clip's segment ended at 2.0 s), and a subtitle would then
    outlast the file."""
    for segment in segments:
        if segment.end <= seconds:
            yield segment
            continue
        words = tuple(
            dataclasses.replace(w, start=min(w.start, seconds), end=min(w.end, seconds))
            for w in segment.words
        )
        yield dataclasses.replace(
            segment, start=min(segment.start, seconds), end=seconds, words=words
        )
