"""One process per bench cell: it loads its engine once, warms up on the first clip (unless
told not to), then runs every clip each time the parent asks, so cells can be interleaved
and each cell's peak RSS is its own."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kvscribe.bench.cells import Cell, batches
from kvscribe.bench.clips import Clip
from kvscribe.chunking import MAX_SECONDS
from kvscribe.errors import KvscribeError
from kvscribe.machine.memtrace import peak_rss_bytes
from kvscribe.provenance import MEASURED, make_provenance


@dataclass
class ClipRun:
    """One clip through one cell: the text and what it cost."""

    name: str
    text: str
    seconds: float
    tokens: int = 0
    kv_self_peak_bytes: int | None = None
    kv_self_full_bytes: int | None = None
    kv_cross_bytes: int | None = None
    kv_provenance: dict[str, str] = field(default_factory=lambda: make_provenance(MEASURED))
    step_seconds: list[float] = field(default_factory=list)
    engine_step_ms: float | None = None  # whisper.cpp's own mean per decoder call
    encoder_seconds: float | None = None
    windows: int = 0
    kv_trace: list[tuple[int, int]] = field(default_factory=list)
    engine_peak_rss_bytes: int | None = None
    batch_size: int = 1  # chunks decoded at once, as the backend reported (1: sequential)


@dataclass
class CellRun:
    clips: list[ClipRun]
    peak_rss_bytes: int | None
    settings: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"  # where the engine actually ran
    warmed_up: list[str] = field(default_factory=list)  # clips decoded untimed before any run


class CellProcess:
    """The parent's handle on one cell's worker process."""

    def __init__(self, cell: Cell, clips: list[Clip], device: str, warm_up: bool = True):
        context = multiprocessing.get_context("spawn")
        self.cell = cell
        self._conn, child = context.Pipe()
        self._proc = context.Process(
            target=_serve, args=(child, cell, clips, device, warm_up), daemon=True
        )
        self._proc.start()
        child.close()

    def ready(self) -> KvscribeError | None:
        """Wait for load + warm-up; the error if the cell cannot run here."""
        return self._receive()

    def run(self) -> CellRun:
        self._conn.send("run")
        return self._receive()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send("stop")
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()

    def _receive(self):
        try:
            message = self._conn.recv()
        except EOFError:
            from kvscribe.errors import EngineError

            raise EngineError(
                f"the bench worker for {self.cell.label} died", hint="rerun with --debug"
            ) from None
        if isinstance(message, Exception) and not isinstance(message, KvscribeError):
            raise message
        return message


def _serve(conn, cell: Cell, clips: list[Clip], device: str, warm_up: bool) -> None:
    runner = None
    try:
        try:
            runner = _make_runner(cell, device)
            warmed = warm_up_clips(cell, clips) if warm_up else []
            for clip in warmed:  # caches, allocator, page cache; not counted
                runner(clip)
        except KvscribeError as exc:
            conn.send(exc)
            return
        except Exception as exc:  # sent to the parent, which re-raises it
            conn.send(RuntimeError(f"{cell.label}: {type(exc).__name__}: {exc}"))
            return
        conn.send(None)
        while conn.recv() == "run":
            results = [runner(clip) for clip in clips]
            # Read after the run: a runner fills in what it ran (a batch size) as it decodes.
            settings = dict(getattr(runner, "settings", {}))
            conn.send(
                CellRun(
                    results,
                    peak_rss_bytes(),
                    settings,
                    runner.device,
                    [clip.name for clip in warmed],
                )
            )
    except KeyboardInterrupt:  # a Ctrl-C reaches every cell: the parent says it stopped
        return
    finally:
        _close(runner)  # whisper-cli's work folder too, whenever the cell ends


def _close(runner) -> None:
    """What a runner holds outside its process (whisper-cli's work folder) goes with it."""
    if hasattr(runner, "close"):
        runner.close()


def warm_up_clips(cell: Cell, clips: list[Clip]) -> list[Clip]:
    """The first clip; a cell that may batch (asked to, or at its profile's batch size) also
    needs one over 30 s (audio that fits one window is never batched), or its first timed
    run would pay for loading the VAD and warming the batch path."""
    may_batch = cell.kind == "kvscribe" and batches(cell.backend)
    if not may_batch or cell.batch_size == 1 or clips[0].seconds > MAX_SECONDS:
        return clips[:1]
    return clips[:1] + [clip for clip in clips if clip.seconds > MAX_SECONDS][:1]


def decode_request(cell: Cell):
    """The request every clip of a kvscribe cell is decoded with. The batch size is passed
    even when it is 1, so batch 1 is the sequential path whatever the profile's default."""
    from kvscribe.contract import DecodeRequest

    return DecodeRequest(batch_size=cell.batch_size)


def _make_runner(cell: Cell, device: str):
    if cell.kind == "faster-whisper":
        return _FasterWhisper(cell, device)
    if cell.kind == "faster-whisper-batched":
        return _FasterWhisperBatched(cell, device)
    if cell.kind == "whisper-cli":
        return _WhisperCli(cell, device)
    return _Kvscribe(cell, device)


class _Kvscribe:
    """A kvscribe backend, exactly as `kvscribe FILE` drives it."""

    def __init__(self, cell: Cell, device: str):
        from kvscribe import models, registry
        from kvscribe import profile as profiles

        backend_cls = registry.get(cell.backend)
        profile = profiles.load(cell.profile)
        if cell.kv_self is not None:
            profile = dataclasses.replace(
                profile,
                kv_self=cell.kv_self,
                kv_cross=cell.kv_cross,
                kv_self_from_command_line=True,  # bench's --policy, not the profile's [kv]
            )
        model = models.resolve(cell.model, backend_cls.capabilities.model_formats)
        self.backend = backend_cls(model, profile, device)
        self.backend.load()
        self.device = device
        self.request = decode_request(cell)
        self.settings = self.backend.describe_settings()

    def __call__(self, clip: Clip) -> ClipRun:
        started = time.perf_counter()
        run = self.backend.transcribe(clip.audio, self.request)
        text = "".join(segment.text for segment in run.segments)
        seconds = time.perf_counter() - started
        report = run.report
        self.settings = {**self.settings, **report.settings}
        steps = report.engine_runs.get("decode", 0) + report.engine_runs.get("batchd", 0)
        engine_ms = report.engine_timings_ms
        return ClipRun(
            clip.name,
            text,
            seconds,
            tokens=report.tokens,
            kv_self_peak_bytes=report.kv_self_peak_bytes,
            kv_self_full_bytes=report.kv_self_full_bytes,
            kv_cross_bytes=report.kv_cross_bytes,
            kv_provenance=dict(report.kv_provenance),
            step_seconds=list(report.step_seconds),
            engine_step_ms=(engine_ms.get("decode", 0) + engine_ms.get("batchd", 0)) / steps
            if steps
            else None,
            encoder_seconds=report.encoder_seconds,
            windows=report.windows,
            kv_trace=list(report.kv_trace),
            engine_peak_rss_bytes=report.engine_peak_rss_bytes,
            batch_size=report.batch_size,
        )


class _FasterWhisper:
    """faster-whisper's WhisperModel called directly with the ctranslate2 cell's options."""

    def __init__(self, cell: Cell, device: str):
        from faster_whisper import WhisperModel

        from kvscribe.contract import DecodeRequest

        mirror = _Kvscribe(dataclasses.replace(cell, kind="kvscribe"), device)
        profile = mirror.backend.completed(DecodeRequest())
        self.beams = profile.beam_size
        self.condition = profile.condition_on_previous_text
        self.profile_batch = profile.batch_size
        compute = mirror.backend.engine.model.compute_type
        path = str(mirror.backend.model.path)
        del mirror  # one model in memory, like the kvscribe cell
        self.model = WhisperModel(path, device=device, compute_type=compute)
        self.device = device
        self.settings = {"compute type": compute, "beam size": str(self.beams)}

    def __call__(self, clip: Clip) -> ClipRun:
        started = time.perf_counter()
        segments, _ = self.model.transcribe(
            clip.audio,
            beam_size=self.beams,
            best_of=self.beams,
            condition_on_previous_text=self.condition,
            vad_filter=False,
            word_timestamps=False,
        )
        text = "".join(segment.text for segment in segments)
        return ClipRun(clip.name, text, time.perf_counter() - started)


class _FasterWhisperBatched(_FasterWhisper):
    """faster-whisper's BatchedInferencePipeline called directly, with its defaults (its VAD,
    chunks decoded without timestamps) at the ctranslate2 cell's beam and batch size."""

    def __init__(self, cell: Cell, device: str):
        from faster_whisper import BatchedInferencePipeline

        super().__init__(cell, device)
        self.batch = cell.batch_size or self.profile_batch
        self.pipeline = BatchedInferencePipeline(self.model)
        self.settings["batch size"] = str(self.batch)

    def __call__(self, clip: Clip) -> ClipRun:
        started = time.perf_counter()
        segments, _ = self.pipeline.transcribe(
            clip.audio, beam_size=self.beams, batch_size=self.batch
        )
        text = "".join(segment.text for segment in segments)
        # as the kvscribe cell reports it: a clip of one window has nothing to batch
        batch = self.batch if clip.seconds > MAX_SECONDS else 1
        return ClipRun(clip.name, text, time.perf_counter() - started, batch_size=batch)


class _WhisperCli:
    """whisper-cli run directly with the whispercpp cell's argv on a WAV of the clip."""

    def __init__(self, cell: Cell, device: str):
        from kvscribe.contract import DecodeRequest
        from kvscribe.decoding import Fallback

        mirror = _Kvscribe(dataclasses.replace(cell, kind="kvscribe"), device)
        self.backend = mirror.backend
        self.device = device  # whisper-cli runs with -ng: the CPU
        self.beams = self.backend.completed(DecodeRequest()).beam_size
        # best_of = the beams: a fallback retry then allocates what beam search does, so the
        # derived self-cache figure (beams + 2 decoders) holds for every window.
        self.request = DecodeRequest(fallback=Fallback(best_of=self.beams))
        self.work = Path(tempfile.mkdtemp(prefix="kvscribe-bench-"))
        self.settings = {"beam size": str(self.beams)}

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)

    def __call__(self, clip: Clip) -> ClipRun:
        from kvscribe.backends.whispercpp import self_cache_bytes
        from kvscribe.backends.whispercpp.process import (
            WhisperProcess,
            check_outcome,
            write_wav_f32,
        )
        from kvscribe.backends.whispercpp.report import parse_segment_line, parse_stderr

        wav = self.work / f"{abs(hash(clip.name))}.wav"
        if not wav.exists():
            write_wav_f32(wav, clip.audio)
        argv = self.backend.argv_for(wav, self.work / "out", self.request, self.beams)
        started = time.perf_counter()
        proc = WhisperProcess(argv, self.work / "stderr.txt", None)
        lines = list(proc.stdout_lines())
        outcome = proc.finish()
        seconds = time.perf_counter() - started
        check_outcome(outcome, argv[0], self.backend.model.path, wav)
        text = "".join(p[2] for line in lines if (p := parse_segment_line(line)))
        figures = parse_stderr(outcome.stderr)
        kv_self, self_provenance = self_cache_bytes(figures.kv_self_bytes, self.beams)
        return ClipRun(
            clip.name,
            text,
            seconds,
            kv_self_peak_bytes=kv_self,
            kv_cross_bytes=figures.kv_cross_bytes,
            kv_provenance=make_provenance(self_provenance, MEASURED),
            encoder_seconds=figures.timings_ms.get("encode", 0) / 1000,
            windows=figures.runs.get("encode", 0),
            engine_peak_rss_bytes=outcome.peak_rss_bytes,
        )
