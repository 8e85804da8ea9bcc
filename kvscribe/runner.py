"""The transcription pipeline, without any printing: options -> profile -> model ->
backend -> segments -> writers -> stats. The CLI listens through `Listener`."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Protocol

from kvscribe import audio, models, registry
from kvscribe import profile as profiles
from kvscribe import setting_rows as row
from kvscribe.audio.stream import Samples, open_streamed
from kvscribe.backends.base import Backend
from kvscribe.contract import DecodeRequest, Transcription
from kvscribe.devices import device_for
from kvscribe.errors import KvscribeError, UsageError
from kvscribe.inputs import Input
from kvscribe.machine import hardware
from kvscribe.machine.memtrace import HeapTrimmer, MemoryTrace
from kvscribe.options import EngineOptions, TranscribeOptions
from kvscribe.stats import CpuClock, FileStats, RunStats
from kvscribe.types import Segment, Transcript
from kvscribe.voice import ahead
from kvscribe.voice.ahead import OpenedAhead
from kvscribe.writers import write_outputs

SHARED_NOTE = (
    "short files were decoded side by side in shared batches: each one's decode seconds is "
    "derived (the shared decode's time, split by audio length)"
)


class Listener(Protocol):
    def file_started(self, source: Path, duration: float) -> None: ...
    def language(self, source: Path, language: str, probability: float | None) -> None: ...
    def segment(self, source: Path, segment: Segment) -> None: ...
    def file_done(self, source: Path, transcript: Transcript, outputs: list[Path]) -> None: ...
    def file_failed(self, source: Path, error: KvscribeError) -> None: ...


class EngineChoice(Protocol):
    """The options that pick and load an engine (TranscribeOptions, LiveOptions)."""

    backend: str
    profile: str
    model: str | None
    device: str | None
    kv_policy: str | None
    kv_cross: str | None


def load_backend(opts: EngineChoice) -> tuple[Backend, RunStats]:
    """Resolve profile, model and backend, and load the model (raises KvscribeError)."""
    run_started = time.perf_counter()  # wall time counts engine checks and model set-up too
    cpu = CpuClock()
    backend_cls = registry.get(opts.backend)
    profile = profiles.load(opts.profile)
    if opts.kv_policy is not None or opts.kv_cross is not None:
        profile = dataclasses.replace(
            profile,
            kv_self=opts.kv_policy or profile.kv_self,
            kv_cross=opts.kv_cross or profile.kv_cross,
            kv_from_command_line=True,
            kv_self_from_command_line=opts.kv_policy is not None,
        )
    profile = _command_line_settings(opts, backend_cls, profile)
    choice = device_for(
        opts.backend, backend_cls.capabilities.devices, profile, opts.device, hardware.detect()
    )
    device = choice.device
    started = time.perf_counter()  # model load = resolve (and convert once) + engine load
    model = models.resolve(opts.model, backend_cls.capabilities.model_formats)
    label = profile.name + (f" ({profile.chosen_by})" if profile.chosen_by else "")
    stats = RunStats(
        backend=opts.backend,
        profile=label,
        model=model.name,
        device=device,
        started=run_started,
        cpu=cpu,
    )
    backend = backend_cls(model, profile, device)
    backend.load()
    if isinstance(opts, EngineOptions):  # a run of one request (not the server's many)
        backend.expect(decode_request(opts))
    stats.load_seconds = time.perf_counter() - started
    stats.settings = backend.describe_settings()
    chosen = from_command_line(opts)
    if chosen:
        stats.settings[row.FROM_COMMAND_LINE] = ", ".join(chosen) + " (the rest: profile)"
    if choice.note is not None:
        stats.notes.append(choice.note)
    return backend, stats


def _command_line_settings(opts: EngineChoice, backend_cls: type[Backend], profile):
    """--compute-type and --threads replace the backend section's settings of the profile."""
    section = dict(profile.settings_for(opts.backend))
    compute_type = getattr(opts, "compute_type", None)
    if compute_type is not None:
        if "compute_type" not in backend_cls.settings_schema:
            raise UsageError(
                f"the {opts.backend} backend has no compute type to choose",
                subject="--compute-type",
                hint="leave it out: this backend runs at its model's precision",
            )
        section["compute_type"] = compute_type
    threads = getattr(opts, "threads", None)
    if threads is not None:
        key = backend_cls.threads_setting()
        if key is None:
            raise UsageError(
                f"the {opts.backend} backend has no thread count to set",
                subject="--threads",
                hint="leave it out",
            )
        section[key] = threads
    if section == dict(profile.settings_for(opts.backend)) and compute_type is None:
        return profile
    return dataclasses.replace(
        profile,
        backends={**profile.backends, opts.backend: section},
        compute_type_from_command_line=compute_type is not None
        or profile.compute_type_from_command_line,
    )


def from_command_line(opts) -> list[str]:
    """The settings this run's flags chose over the profile's, for the stats report."""
    given = {
        row.BEAM_SIZE: getattr(opts, "beam_size", None),
        row.BATCH_SIZE: getattr(opts, "batch_size", None),
        row.COMPUTE_TYPE: getattr(opts, "compute_type", None),
        row.THREADS: getattr(opts, "threads", None),
        row.DEVICE: opts.device,
        row.SELF_POLICY: opts.kv_policy,
        row.CROSS_POLICY: opts.kv_cross,
        row.PREVIOUS_TEXT: getattr(opts, "condition_on_previous_text", None),
    }
    return [name for name, value in given.items() if value is not None]


def decode_request(opts: EngineOptions) -> DecodeRequest:
    """The one request a file run or a live session decodes with, from its options."""
    return DecodeRequest(**opts.request_fields())


class Runner:
    """Loads one backend for the run and transcribes every input with it."""

    def __init__(self, options: TranscribeOptions):
        self.options = options
        self.backend: Backend | None = None
        self.stats: RunStats | None = None
        self._ahead: OpenedAhead | None = None

    def prepare(self, first: Path | None = None) -> RunStats:
        """Resolve profile, model and backend, and load the model (raises KvscribeError);
        `first`, the run's first file, is opened and its speech scanned meanwhile, where its
        decode will read the scan (kvscribe.voice.ahead). The scan starts before the
        engine's own libraries are imported (registry.get), which keep one core busy."""
        capabilities = registry.imported(self.options.backend).capabilities
        if first is not None and ahead.wanted(capabilities, decode_request(self.options)):
            self._ahead = OpenedAhead.open(first)
        try:
            self.backend, self.stats = load_backend(self.options)
        except BaseException:
            if self._ahead is not None:
                self._ahead.close()
                self._ahead = None
            raise
        return self.stats

    def opened_ahead(self, path: Path) -> Samples | None:
        """`path`'s audio if prepare() opened it (its scan done), once; None otherwise."""
        opened, self._ahead = self._ahead, None
        if opened is None:
            return None
        samples = opened.take(path)
        if samples is not None and opened.seconds is not None and self.stats is not None:
            self.stats.notes.append(
                f"the first file's speech was scanned while the model loaded ({opened.seconds:.2f}"
                " s, not in the time by stage)"
            )
        return samples

    def run(self, inputs: list[Input], listener: Listener) -> RunStats:
        """Transcribe every input in order, transcripts to the listener (no files: a run
        into an output folder is a batch.Batch); bad ones are reported, the rest still run."""
        if self.backend is None or self.stats is None:
            self.prepare(next((entry.path for entry in inputs if entry.error is None), None))
        assert self.stats is not None  # set by prepare()
        for entry in inputs:
            error = entry.error
            if error is None:
                try:
                    done = self.transcribe_file(entry.path, listener, None)
                except KvscribeError as exc:
                    error = exc
                else:
                    self.stats.files.append(done[0])
                    listener.file_done(entry.path, done[1], done[2])
            if error is not None:
                self.stats.files.append(FileStats(str(entry.path), error=error.one_line()))
                listener.file_failed(entry.path, error)
        self.stats.finish()
        return self.stats

    def transcribe_file(
        self, path: Path, listener: Listener, base: Path | None, samples: Samples | None = None
    ) -> tuple[FileStats, Transcript, list[Path]]:
        """Decode, transcribe and (with `base`, the output path minus extension) write one
        input (`samples`: its audio, already opened). Raises KvscribeError naming the file.
        The audio streams: the backend reads it a window at a time, so memory does not grow
        with the file's length."""
        assert self.backend is not None and self.stats is not None, "call prepare() first"
        opts = self.options
        memory, heap = MemoryTrace(), HeapTrimmer()
        memory.sample(0.0)
        if samples is None:
            samples = self.opened_ahead(path) or open_streamed(path)  # decoded as it is read
        duration = samples.size / audio.SAMPLE_RATE
        listener.file_started(path, duration)
        request = decode_request(opts)
        file_stats = FileStats(str(path), audio_seconds=duration, memory=memory)
        started = time.perf_counter()
        try:
            run = self._transcribe(samples, request)
            listener.language(path, run.language, run.language_probability)
            segments = []
            for segment in run.segments:
                if file_stats.first_segment_seconds is None:
                    file_stats.first_segment_seconds = time.perf_counter() - started
                    memory.warmed_up(segment.end)
                memory.sample(segment.end)
                heap.reached(segment.end)
                segments.append(segment)
                listener.segment(path, segment)
            file_stats.decode_seconds = time.perf_counter() - started
            memory.sample(duration, force=True)
            transcript = Transcript(
                str(path), run.language, duration, segments, run.language_probability
            )
            written = []
            if base is not None:
                written = write_outputs(
                    transcript, base.parent, base.name, opts.formats, opts.writer_options()
                )
        except KvscribeError as exc:
            if exc.subject is None:  # an engine failure that could not name the file itself
                exc.subject = str(path)
            raise
        finally:
            samples.close()
        file_stats.language, file_stats.report = run.language, run.report
        file_stats.language_probability = run.language_probability
        self.stats.settings.update(run.report.settings)
        return file_stats, transcript, written

    def shares_batches(self) -> bool:
        """Whether short inputs may be decoded side by side (transcribe_together)."""
        assert self.backend is not None, "call prepare() first"
        return self.backend.shares_batches(decode_request(self.options))

    def transcribe_together(
        self, paths: list[Path], opened: list[Samples], listener: Listener
    ) -> list[tuple[FileStats, Transcript]]:
        """Short inputs (at most 30 s each, `opened` by open_streamed) decoded side by side
        in shared batches (Backend.transcribe_together); nothing written. The decoding is
        shared, so each file's decode seconds is derived: the shared time split by audio."""
        assert self.backend is not None and self.stats is not None, "call prepare() first"
        request = decode_request(self.options)
        durations = [samples.size / audio.SAMPLE_RATE for samples in opened]
        memories = [MemoryTrace() for _ in paths]
        for path, duration, memory in zip(paths, durations, memories, strict=True):
            memory.sample(0.0)
            listener.file_started(path, duration)
        started = time.perf_counter()
        runs = self.backend.transcribe_together(opened, request)
        elapsed = time.perf_counter() - started
        if len(paths) > 1 and SHARED_NOTE not in self.stats.notes:
            self.stats.notes.append(SHARED_NOTE)
        total = sum(durations)
        done = []
        for path, duration, memory, run in zip(paths, durations, memories, runs, strict=True):
            run.report.not_applicable += self.backend.unhonoured(request, math.inf)
            listener.language(path, run.language, run.language_probability)
            segments = list(run.segments)
            for segment in segments:
                listener.segment(path, segment)
            memory.sample(duration, force=True)
            share = duration / total if total else 1 / len(paths)
            file_stats = FileStats(
                str(path),
                audio_seconds=duration,
                decode_seconds=elapsed * share,
                language=run.language,
                language_probability=run.language_probability,
                report=run.report,
                memory=memory,
            )
            self.stats.settings.update(run.report.settings)
            transcript = Transcript(
                str(path), run.language, duration, segments, run.language_probability
            )
            done.append((file_stats, transcript))
        return done

    def _transcribe(self, samples: Samples, request: DecodeRequest) -> Transcription:
        from kvscribe.pipeline import transcribe_speech

        assert self.backend is not None
        return transcribe_speech(self.backend, samples, request)
