"""One file's audio through a loaded backend: the cuts made before the engine sees it, then
the engine call. `--clip-timestamps` spans first; then `--vad-filter` for backends whose
engine has no VAD of its own (kvscribe.voice.regions); else long runs of digital silence
(kvscribe.voice.digital_silence), unless the backend's batched chunks cut every pause out
themselves. The audio kept is joined into one shorter signal, as faster-whisper does; a
time in it maps back through the region it falls in (kvscribe.timing.timemap), so the joins never
hold text and what follows them keeps its real time.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from kvscribe import setting_rows as row
from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import Joined, Samples
from kvscribe.timing.timemap import TimeMap, within_audio
from kvscribe.voice.digital_silence import without_digital_silence
from kvscribe.voice.regions import speech_only

if TYPE_CHECKING:
    from kvscribe.backends.base import Backend
    from kvscribe.contract import DecodeRequest, Transcription


def transcribe_speech(backend: Backend, samples: Samples, request: DecodeRequest) -> Transcription:
    """`backend`'s transcription of `samples`, with --vad-filter done here when its engine has
    none, and long digital silence cut out (a pause costs no window of its own and no lost
    context, as a clip boundary would; a backend whose batched chunks cut pauses itself
    sees them, so its segments end there), times mapped back to the input and ending by
    its end."""
    run = _transcribed(backend, samples, request)
    seconds = samples.size / SAMPLE_RATE
    return dataclasses.replace(run, segments=within_audio(run.segments, seconds))


def _transcribed(backend: Backend, samples: Samples, request: DecodeRequest) -> Transcription:
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
