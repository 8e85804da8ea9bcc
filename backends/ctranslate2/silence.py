"""What the ctranslate2 backend does not decode: faster-whisper's VAD filter (silero fed a
block at a time, backends/ctranslate2/vad.py; the speech joined lazily and times put back on the
original clock). (Long runs of digital silence are cut out before any backend sees the
audio: kvscribe/pipeline.py; text from windows the model judges silent is dropped by
kvscribe.decoding.unspoken.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import Joined, Samples
from kvscribe.decoding import VadFilter


@dataclass(frozen=True)
class SpeechClock:
    """faster-whisper's VAD filter, its speech timestamps computed block by block (the same
    as `vad_filter=True` finds, to the sample): the speech it keeps, joined lazily, and the
    way back to the original clock.

    faster-whisper maps a segment's start and end each on their own, so a segment whose
    start timestamp sits in the padding before a removed silence and whose text follows
    it spans the whole silence (measured: JFK with 30 s inserted, " ask what you can do"
    at 8.0-40.86 s). `restore` starts such a segment where the speech after the silence
    starts, and ends one that only reaches into the next chunk's padding before it."""

    speech: Samples  # Joined regions of the input (read in slices, never whole)
    clock: object  # faster_whisper.vad.SpeechTimestampsMap over the chunks kept
    pad_seconds: float

    @classmethod
    def of(cls, audio: Samples, vad: VadFilter) -> SpeechClock:
        from faster_whisper.vad import VadOptions

        from kvscribe.adapters.faster_whisper import speech_clock
        from kvscribe.backends.ctranslate2.vad import regions_of, speech_timestamps

        options = VadOptions(
            threshold=vad.threshold,
            min_speech_duration_ms=round(vad.min_speech_seconds * 1000),
            min_silence_duration_ms=round(vad.min_silence_seconds * 1000),
            speech_pad_ms=round(vad.pad_seconds * 1000),
        )
        chunks = speech_timestamps(audio, options)
        if not chunks:
            return cls(Joined(audio, []), None, vad.pad_seconds)
        clock = speech_clock(chunks, SAMPLE_RATE)
        return cls(Joined(audio, regions_of(chunks, audio.size)), clock, vad.pad_seconds)

    def restore(self, segment):
        """A faster-whisper segment (times on the joined speech) on the original clock."""
        clock = self.clock
        if segment.words:  # each word within one chunk, by its middle (faster-whisper's rule)
            for word in segment.words:
                chunk = clock.get_chunk_index((word.start + word.end) / 2)
                word.start = clock.get_original_time(word.start, chunk)
                word.end = clock.get_original_time(word.end, chunk)
            start, end = segment.words[0].start, segment.words[-1].end
        else:
            start, end = self._segment_span(clock, segment.start, segment.end)
        seek = clock.get_original_time(segment.seek / 100) * 100
        return replace(segment, start=start, end=end, seek=round(seek))

    def _segment_span(self, clock, start: float, end: float) -> tuple[float, float]:
        first = clock.get_chunk_index(start)
        last = clock.get_chunk_index(end, is_end=True)
        if first < last:  # the segment crosses removed audio
            boundary = clock.chunk_end_sample[first] / SAMPLE_RATE
            if boundary - start <= self.pad_seconds:  # starts in padding before the cut
                first, start = first + 1, boundary
            else:
                previous_end = clock.chunk_end_sample[last - 1] / SAMPLE_RATE
                if end - previous_end <= self.pad_seconds:  # ends in padding after the cut
                    last, end = last - 1, previous_end
        return clock.get_original_time(start, first), clock.get_original_time(end, last)


def to_decode(audio: Samples, clock: SpeechClock | None) -> Samples:
    """What faster-whisper decodes: the input, or the speech the VAD kept (joined lazily;
    an array's speech as an array, as faster-whisper's own filter gives it)."""
    if clock is None:
        return audio
    if isinstance(audio, np.ndarray):
        return clock.speech[0 : clock.speech.size]
    return clock.speech


def describe_vad(vad: VadFilter) -> str:
    return (
        f"silero (faster-whisper), threshold {vad.threshold:g}, min silence "
        f"{vad.min_silence_seconds:g} s, pad {vad.pad_seconds:g} s"
    )
