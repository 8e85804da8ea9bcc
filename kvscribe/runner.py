"""The transcription pipeline, without any printing: options -> profile -> model ->
backend -> segments -> writers -> stats. The CLI listens through `Listener`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from kvscribe import audio, hardware, models, registry
from kvscribe import profile as profiles
from kvscribe.backends.base import Backend, DecodeRequest
from kvscribe.errors import InputNotFoundError, KvscribeError, UsageError
from kvscribe.options import TranscribeOptions
from kvscribe.stats import FileStats, RunStats
from kvscribe.types import Segment, Transcript
from kvscribe.writers import write_outputs


class Listener(Protocol):
    def file_started(self, source: Path, duration: float) -> None: ...
    def segment(self, source: Path, segment: Segment) -> None: ...
    def file_done(self, source: Path, transcript: Transcript, outputs: list[Path]) -> None: ...
    def file_failed(self, source: Path, error: KvscribeError) -> None: ...


def expand_inputs(paths: Iterable[Path]) -> list[tuple[Path, KvscribeError | None]]:
    """Files as given, folders as the audio files directly inside them (sorted).

    A bad entry is kept with its error, so it is reported in order and the rest still run.
    """
    expanded: list[tuple[Path, KvscribeError | None]] = []
    for path in paths:
        if path.is_dir():
            found = sorted(
                p
                for p in path.iterdir()
                if p.is_file() and p.suffix.lower() in audio.AUDIO_EXTENSIONS
            )
            if not found:
                expanded.append(
                    (
                        path,
                        InputNotFoundError(
                            "folder holds no audio files",
                            subject=str(path),
                            hint="pass audio files, or a folder with .wav/.mp3/.flac/... in it",
                        ),
                    )
                )
            expanded.extend((p, None) for p in found)
            continue
        try:
            audio.check_readable(path)
            expanded.append((path, None))
        except KvscribeError as exc:
            expanded.append((path, exc))
    return expanded


def check_output_collisions(inputs: list[Path], options: TranscribeOptions) -> None:
    if options.output_dir is None:
        return
    seen: dict[str, Path] = {}
    for path in inputs:
        other = seen.setdefault(path.stem, path)
        if other != path:
            raise UsageError(
                f"{other} and {path} would both write {path.stem}.*",
                subject=str(options.output_dir),
                hint="rename one, or run them with different --output-dir",
            )


class Runner:
    """Loads one backend for the run and transcribes every input with it."""

    def __init__(self, options: TranscribeOptions):
        self.options = options
        self.backend: Backend | None = None
        self.stats: RunStats | None = None

    def prepare(self) -> RunStats:
        """Resolve profile, model and backend, and load the model (raises KvscribeError)."""
        opts = self.options
        run_started = time.perf_counter()  # wall time counts engine checks and model set-up too
        backend_cls = registry.get(opts.backend)
        profile = profiles.load(opts.profile)
        if opts.kv_policy is not None or opts.kv_cross is not None:
            profile = dataclasses.replace(
                profile,
                kv_self=opts.kv_policy or profile.kv_self,
                kv_cross=opts.kv_cross or profile.kv_cross,
            )
        device = profiles.pick_device(profile, opts.device, hardware.detect())
        if device not in backend_cls.capabilities.devices:
            raise UsageError(
                f"backend {opts.backend} cannot run on {device}",
                subject="--device",
                hint=f"use one of: {', '.join(backend_cls.capabilities.devices)}",
            )
        started = time.perf_counter()  # model load = resolve (and convert once) + engine load
        model = models.resolve(opts.model, backend_cls.capabilities.model_formats)
        label = profile.name + (f" ({profile.chosen_by})" if profile.chosen_by else "")
        stats = RunStats(
            backend=opts.backend,
            profile=label,
            model=model.name,
            device=device,
            started=run_started,
        )
        self.backend = backend_cls(model, profile, device)
        self.backend.load()
        stats.load_seconds = time.perf_counter() - started
        stats.settings = self.backend.describe_settings()
        self.stats = stats
        return stats

    def run(self, inputs: list[tuple[Path, KvscribeError | None]], listener: Listener) -> RunStats:
        if self.backend is None or self.stats is None:
            self.prepare()
        assert self.stats is not None  # set by prepare()
        for path, error in inputs:
            if error is None:
                error = self._one(path, listener)
            if error is not None:
                self.stats.files.append(FileStats(str(path), error=error.one_line()))
                listener.file_failed(path, error)
        self.stats.finish()
        return self.stats

    def _one(self, path: Path, listener: Listener) -> KvscribeError | None:
        opts = self.options
        try:
            samples = audio.load_audio(path)
        except KvscribeError as exc:
            return exc
        duration = samples.size / audio.SAMPLE_RATE
        listener.file_started(path, duration)
        request = DecodeRequest(opts.language, opts.task, opts.beam_size)
        file_stats = FileStats(str(path), audio_seconds=duration)
        started = time.perf_counter()
        try:
            run = self.backend.transcribe(samples, request)
            segments = []
            for segment in run.segments:
                if file_stats.first_segment_seconds is None:
                    file_stats.first_segment_seconds = time.perf_counter() - started
                segments.append(segment)
                listener.segment(path, segment)
            file_stats.decode_seconds = time.perf_counter() - started
            transcript = Transcript(str(path), run.language, duration, segments)
            outputs = []
            if opts.output_dir is not None:
                outputs = write_outputs(transcript, opts.output_dir, path.stem, opts.formats)
        except KvscribeError as exc:
            if exc.subject is None:  # an engine failure that could not name the file itself
                exc.subject = str(path)
            return exc
        file_stats.language, file_stats.report = run.language, run.report
        self.stats.settings.update(run.report.settings)
        self.stats.files.append(file_stats)
        listener.file_done(path, transcript, outputs)
        return None
