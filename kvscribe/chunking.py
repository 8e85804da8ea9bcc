"""Cut long audio into <= 30 s chunks at speech pauses, for batched decoding (what a
chunk's decode skips is read again: kvscribe.rereads).

The speech regions come from the same silero VAD and hysteresis live mode runs
(kvscribe.voice), fed the whole file. Neighbouring regions join into one chunk
while the chunk stays within `max_seconds` and the pause between them is short;
a region longer than that is cut at its quietest point. A chunk is a contiguous
span of the original audio, so a time inside it maps back by adding its start:
exactly, with no resampling or concatenation. Audio outside every chunk (silence)
is never decoded, so it cannot produce text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import Samples
from kvscribe.contract import DecodeRequest, DecoderReport, Transcription
from kvscribe.timing.timemap import TimeMap
from kvscribe.types import Segment
from kvscribe.voice.regions import FILE_VAD, speech_probabilities, speech_regions
from kvscribe.voice.silero import WINDOW, VadSettings

if TYPE_CHECKING:
    from kvscribe.decoding import VadFilter

MAX_SECONDS = 30.0  # Whisper's window


@dataclass(frozen=True)
class Chunk:
    """Samples [start, end) of the original audio; speech in it ends at `speech_end`
    (before the padding). With `spans`, only those parts of [start, end) are decoded,
    joined end to end (the pauses between them cut out), and `time_map` takes a time in
    the joined audio back to the original clock. `source`: which of the inputs decoded
    side by side it is from (kvscribe.aligned_chunks.shared_segments; 0 for one alone).
    `reread`: a part of a chunk its decode left uncovered, read again (kvscribe.rereads)."""

    start: int
    end: int
    speech_end: int = -1
    spans: tuple[tuple[int, int], ...] = ()
    source: int = 0
    reread: bool = False

    def __post_init__(self) -> None:
        if self.speech_end < 0:
            object.__setattr__(self, "speech_end", self.end)
        if not self.spans:
            object.__setattr__(self, "spans", ((self.start, self.end),))

    @property
    def start_seconds(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def seconds(self) -> float:
        """How long the decoded audio is (the spans joined)."""
        return sum(end - begin for begin, end in self.spans) / SAMPLE_RATE

    @property
    def speech_seconds(self) -> float:
        """How much of the decoded audio is speech (the spans, before speech ends)."""
        return self.decoded_within(self.start, self.end) / SAMPLE_RATE

    @property
    def time_map(self) -> TimeMap:
        return TimeMap(self.spans)

    def samples(self, audio: Samples) -> np.ndarray:
        """The audio the decoder reads: the spans of `audio`, joined."""
        parts = [audio[begin:end] for begin, end in self.spans]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def after(self, sample: int) -> Chunk:
        """The rest of the chunk from `sample` (original clock) on."""
        return self.between(sample, self.end)

    def between(self, begin: int, end: int) -> Chunk:
        """The part of the chunk in [begin, end) (original clock; it must hold decoded audio),
        to read again."""
        spans = tuple((max(a, begin), min(b, end)) for a, b in self.spans if b > begin and a < end)
        speech_end = min(self.speech_end, end) if end < self.end else self.speech_end
        return Chunk(spans[0][0], spans[-1][1], speech_end, spans, self.source, reread=True)

    def decoded_within(self, begin: int, end: int) -> int:
        """Samples of [begin, end) the decoder reads (inside the spans, before speech ends)."""
        end = min(end, self.speech_end)
        return sum(max(0, min(b, end) - max(a, begin)) for a, b in self.spans)


@dataclass(frozen=True)
class ChunkRules:
    max_seconds: float = MAX_SECONDS
    # A longer pause ends the chunk (silence stays out of the decoder); None: none does.
    max_gap: float | None = 2.0
    vad: VadSettings = FILE_VAD
    # Pauses between speech regions cut out of the decoded audio (faster-whisper's batched
    # pipeline does this too): a window holds more speech, so a file takes fewer windows,
    # and no pause needs to end a chunk.
    cut_pauses: bool = False


# The batched paths' chunks (both engines): windows filled with speech, every pause cut out.
BATCHED = ChunkRules(max_gap=None, cut_pauses=True)


def batched_rules(vad: VadFilter | None) -> ChunkRules:
    """The batched paths' rules for a request: the chunker is a VAD already, so a requested
    filter (`--vad-filter`) sets its threshold and shortest speech; its pauses and padding
    stay the ones chunking is tuned for."""
    if vad is None:
        return BATCHED
    settings = replace(FILE_VAD, threshold=vad.threshold, min_speech=vad.min_speech_seconds)
    return replace(BATCHED, vad=settings)


def speech_chunks(audio: Samples, rules: ChunkRules = ChunkRules()) -> list[Chunk]:
    """The chunks of `audio` (mono 16 kHz float32, an array or streamed) that hold speech,
    in time order."""
    probabilities = speech_probabilities(audio)
    regions = speech_regions(probabilities, rules.vad, audio.size)
    return join_regions(regions, probabilities, rules, audio.size)


def join_regions(
    regions: list[tuple[int, int]], probabilities: np.ndarray, rules: ChunkRules, total: int
) -> list[Chunk]:
    """Merge regions into chunks of at most `max_seconds`, splitting any longer region."""
    limit = int(rules.max_seconds * SAMPLE_RATE)
    gap = total if rules.max_gap is None else int(rules.max_gap * SAMPLE_RATE)
    pad = int(rules.vad.pad * SAMPLE_RATE)
    chunks: list[Chunk] = []
    for begin, end in regions:
        for piece_start, piece_end in _split_long(begin, end, probabilities, limit):
            piece_end = min(piece_end, total)
            speech_end = max(piece_start, piece_end - pad)
            last = chunks[-1] if chunks else None
            joined = _joined(last, piece_start, piece_end, speech_end, rules.cut_pauses)
            if last and piece_start - last.end <= gap and joined.seconds * SAMPLE_RATE <= limit:
                chunks[-1] = joined
            else:
                chunks.append(Chunk(piece_start, piece_end, speech_end))
    return chunks


def _joined(last: Chunk | None, start: int, end: int, speech_end: int, cut_pauses: bool):
    """`last` grown to take [start, end): with the pause between them, or without it."""
    if last is None:
        return Chunk(start, end, speech_end)
    if not cut_pauses:
        return Chunk(last.start, end, speech_end)
    *before, (first, previous_end) = last.spans
    touching = start <= previous_end  # padding met: one span
    spans = (*before, (first, end)) if touching else (*last.spans, (start, end))
    return Chunk(last.start, end, speech_end, spans)


def _split_long(begin: int, end: int, probabilities: np.ndarray, limit: int):
    """Cut [begin, end) into pieces <= limit at the least speech-like window of each
    piece's second half (a breath between words, when there is one)."""
    while end - begin > limit:
        low, high = (begin + limit // 2) // WINDOW, (begin + limit) // WINDOW
        window = probabilities[low:high]
        cut = (low + int(np.argmin(window))) * WINDOW if window.size else begin + limit
        cut = min(max(cut, begin + WINDOW), begin + limit)
        yield begin, cut
        begin = cut
    yield begin, end


# -- what a chunk's decode says ----------------------------------------------------------


@dataclass(frozen=True)
class ChunkResult:
    """What the decoder made of one chunk: its text tokens (end-of-text excluded) and the
    window scores openai-whisper's silence rule reads."""

    tokens: list[int]
    avg_logprob: float
    no_speech_prob: float

    def plausible_part(self) -> ChunkResult | None:
        """The decode without what reads as made up rather than heard; None when nothing
        is left (only a result that says how its words fall in time can tell: itself)."""
        return self

    def stopped_at(self, chunk: Chunk) -> int | None:
        """The sample (original clock) where the decoded text ends; None when it ran to the
        chunk's end or cannot tell (kvscribe.aligned_chunks.AlignedChunk can: its last
        aligned word)."""
        return None

    def word_spans(self) -> list[tuple[int, int]]:
        """(start, end) samples (original clock) of each decoded word; empty when the result
        cannot tell."""
        return []

    def without_echoes(self, part: Chunk, around: ChunkResult) -> ChunkResult:
        """This decode of `part` (a stretch `around` left uncovered) without a word at its
        edge that repeats the word of `around` beside it (the result cannot tell: itself)."""
        return self

    def within(self, chunk: Chunk) -> ChunkResult:
        """The part of this decode that falls in `chunk` (a stretch of the chunk decoded; the
        whole decode when the result cannot tell where its words fall)."""
        return self


def shared_by_language(
    audios: Sequence[Samples],
    request: DecodeRequest,
    language_of: Callable[[Samples, list, DecodeRequest], tuple[str, float | None]],
    decode: Callable[[str, list[list]], list[tuple[list[Segment], DecoderReport]]],
) -> list[Transcription]:
    """transcribe_together's frame, for every engine: each input's speech chunks (`source`:
    its number) and language (`language_of(audio, chunks, request)`); then, language by
    language, `decode(language, runs)` decodes those inputs' runs of chunks side by side
    and gives each its (segments, report)."""
    rules = batched_rules(request.vad)
    chunked = [
        [replace(chunk, source=number) for chunk in speech_chunks(audio, rules)]
        for number, audio in enumerate(audios)
    ]
    languages = [
        language_of(audio, chunks, request) for audio, chunks in zip(audios, chunked, strict=True)
    ]
    runs: dict[int, Transcription] = {}
    for language in dict.fromkeys(language for language, _ in languages):
        members = [n for n, (lang, _) in enumerate(languages) if lang == language]
        decoded = decode(language, [chunked[n] for n in members])
        for number, (segments, report) in zip(members, decoded, strict=True):
            probability = languages[number][1]
            runs[number] = Transcription(language, probability, iter(segments), report)
    return [runs[number] for number in range(len(audios))]
