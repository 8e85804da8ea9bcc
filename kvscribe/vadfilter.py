"""`--vad-filter` for backends whose engine has no VAD of its own: cut the silence out
of a file before decoding, then put every time back on the original clock. Long runs of
digital silence are cut out the same way (Whisper reads them as "You"), unless the
backend's batched chunks cut every pause out themselves.

The speech regions come from the silero VAD that live mode and batched decoding use
(the same hysteresis, with faster-whisper's defaults). The regions are joined into
one shorter signal, as faster-whisper does; a time in it maps back through the
region it falls in, so the inserted silence never holds text and what follows it
keeps its real time.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from kvscribe import setting_rows as row
from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio_stream import PEAK_FRAME, Joined, Samples, frame_peaks
from kvscribe.decoding import VadFilter
from kvscribe.timemap import TimeMap

if TYPE_CHECKING:
    from kvscribe.backends.base import Backend
    from kvscribe.contract import DecodeRequest, Transcription


def speech_only(audio: Samples, settings: VadFilter) -> tuple[Joined, TimeMap]:
    """The speech in `audio` (mono 16 kHz float32, an array or streamed) joined end to end
    (lazily: nothing is copied until it is read), and its time map."""
    from kvscribe.chunking import speech_probabilities, speech_regions
    from kvscribe.live.vad import VadSettings

    hysteresis = VadSettings(
        threshold=settings.threshold,
        min_silence=settings.min_silence_seconds,
        min_speech=settings.min_speech_seconds,
        pad=settings.pad_seconds,
        min_utterance=0.0,  # a file has no listener waiting: no joining of short utterances
    )
    probabilities = speech_probabilities(audio)
    regions = _merged(speech_regions(probabilities, hysteresis, audio.size))
    return Joined(audio, regions), TimeMap(tuple(regions))


def _merged(regions: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Touching regions (padding met) become one, so no join sits inside continuous speech."""
    merged: list[tuple[int, int]] = []
    for begin, end in regions:
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        elif end > begin:
            merged.append((begin, end))
    return merged


# Samples within 2 steps of 16-bit zero hold nothing to hear (about -84 dBFS).
DIGITAL_SILENCE_PEAK = 2 / 32768
# Runs at least this long are not decoded: Whisper reads a window of nothing as "You"
# (tiny.en, 20 s of zeros: no-speech probability 0.94, but mean log-probability -0.78
# passes openai-whisper's -1.0 test, so its silence rule keeps the text).
MIN_DIGITAL_SILENCE = 1.0
# Of each run cut out, this much stays at either end (the file's start excepted): a
# pause still reads as one where two utterances meet, so the decoder does not run them
# together, and a window holds speech, not silence.
KEPT_SILENCE = 0.1
_FRAME = PEAK_FRAME  # 10 ms


def without_digital_silence(audio: Samples) -> tuple[Joined, TimeMap] | None:
    """`audio` without its runs of digital silence of MIN_DIGITAL_SILENCE or more (joined
    lazily), and the time map back; None when there are none (the audio decodes as it is).
    Found from the 10 ms peak envelope, which a streamed file has from its scan."""
    silent = frame_peaks(audio) <= DIGITAL_SILENCE_PEAK
    edges = np.flatnonzero(np.diff(np.concatenate(([0], silent.astype(np.int8), [0]))))
    runs = [
        _cut_of(int(a) * _FRAME, min(int(b) * _FRAME, audio.size), audio.size)
        for a, b in zip(edges[::2], edges[1::2], strict=True)
        if b - a >= MIN_DIGITAL_SILENCE * 100
    ]
    if not runs:
        return None
    regions, at = [], 0
    for begin, end in runs:
        if begin > at:
            regions.append((at, begin))
        at = end
    if at < audio.size:
        regions.append((at, audio.size))
    return Joined(audio, regions), TimeMap(tuple(regions))


def _cut_of(begin: int, end: int, total: int) -> tuple[int, int]:
    """The part of a silent run [begin, end) to cut: a run at either end of the file goes
    whole, one between sounds keeps KEPT_SILENCE at either side."""
    if begin == 0 or end >= total:
        return begin, end
    keep = round(KEPT_SILENCE * SAMPLE_RATE)
    return begin + keep, end - keep


def transcribe_speech(backend: Backend, samples: Samples, request: DecodeRequest) -> Transcription:
    """`backend`'s transcription of `samples`, with --vad-filter done here when its engine has
    none, and long digital silence cut out (a pause costs no window of its own and no lost
    context, as a clip boundary would; a backend whose batched chunks cut pauses itself
    sees them, so its segments end there), times mapped back to the input."""
    if request.clips:  # first: the rest (VAD, digital silence) acts on the spans kept
        clipped, time_map = clipped_audio(samples, request.clips)
        note = f"{_seconds(clipped)} of {_seconds(samples)} s decoded ({len(request.clips)} spans)"
        if clipped.size == 0:
            return _nothing_to_decode(request, (row.CLIP_TIMESTAMPS, note))
        run = transcribe_speech(backend, clipped, dataclasses.replace(request, clips=()))
        run.report.settings[row.CLIP_TIMESTAMPS] = note
        return dataclasses.replace(run, segments=time_map.segments(run.segments))
    capabilities = backend.capabilities
    if not capabilities.streams_audio:  # a backend written for arrays: the whole file
        samples = samples[0 : samples.size]
    if request.vad is not None and not capabilities.vad_filter:
        speech, time_map = speech_only(samples, request.vad)
        note = f"{_seconds(speech)} of {_seconds(samples)} s kept (kvscribe's silero VAD)"
        return _on_kept_audio(backend, speech, time_map, request, (row.VAD_FILTER, note))
    if request.vad is None and not _cuts_pauses_itself(backend, samples, request):
        cut = without_digital_silence(samples)
        if cut is not None:
            note = f"{_seconds(samples) - _seconds(cut[0]):.1f} s not decoded"
            return _on_kept_audio(backend, *cut, request, (row.DIGITAL_SILENCE, note))
    return _decoded(backend, samples, request)


def _decoded(backend: Backend, samples: Samples, request: DecodeRequest) -> Transcription:
    """`backend`'s transcription of exactly `samples`, with a "not applicable" row for each
    optional field of `request` the path that decodes them does not honour."""
    run = backend.transcribe(samples, request)
    run.report.not_applicable += backend.unhonoured(request, samples.size / SAMPLE_RATE)
    return run


def clipped_audio(audio: Samples, clips) -> tuple[Joined, TimeMap]:
    """The spans of `audio` that --clip-timestamps names, joined, and the time map back;
    spans past the end of the audio are cut short or dropped."""
    regions = []
    for start, end in clips:
        begin = min(round(start * SAMPLE_RATE), audio.size)
        stop = audio.size if end is None else min(round(end * SAMPLE_RATE), audio.size)
        if stop > begin:
            regions.append((begin, stop))
    return Joined(audio, regions), TimeMap(tuple(regions))


def _cuts_pauses_itself(backend: Backend, samples: Samples, request: DecodeRequest) -> bool:
    """Whether `backend` will decode `samples` in batched chunks with the pauses cut out."""
    seconds = samples.size / SAMPLE_RATE
    return backend.capabilities.batched_cuts_pauses and backend.batch_size_for(request, seconds) > 1


def _on_kept_audio(backend: Backend, kept, time_map: TimeMap, request, note: tuple[str, str]):
    """Decode only `kept` (audio cut out of the input), times mapped back to the input."""
    from kvscribe.contract import Transcription

    if kept.size == 0:
        return _nothing_to_decode(request, note)
    run = _decoded(backend, kept, dataclasses.replace(request, vad=None))
    run.report.settings[note[0]] = note[1]
    return Transcription(
        run.language, run.language_probability, time_map.segments(run.segments), run.report
    )


def _nothing_to_decode(request: DecodeRequest, note: tuple[str, str]) -> Transcription:
    """No text, and no engine call on empty audio."""
    from kvscribe.contract import DecoderReport, Transcription

    report = DecoderReport(settings=dict([note]))
    return Transcription(request.language or "en", None, iter(()), report)


def _seconds(samples) -> float:
    return round(samples.size / SAMPLE_RATE, 1)
