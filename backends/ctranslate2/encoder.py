"""The audio encoder on onnxruntime, feeding CTranslate2's decoder, where it measures faster.

CTranslate2's `Whisper.generate`, `align` and `detect_language` take the encoder's output
(`[batch, frames / 2, d_model]`) in place of log-mel features. `OnnxEncodedModel` wraps a
CTranslate2 Whisper model so that its `encode` runs the graph kvscribe/models/onnx_encoder.py
writes from the same weights; every other call goes to CTranslate2, so faster-whisper's
transcribe (`--batch-size 1`), the batched chunks and live mode all take it unchanged.

Which encoder runs is the profile's `[ctranslate2] encoder` setting: "onnxruntime",
"ctranslate2", or "auto" (the default), which times both on this machine, for this model,
compute type and thread count, once, and keeps the answer in the cache
(`<cache>/encoders/`): once more, an hour on and on a quiet machine, where the first
timing shared the cores with other work (kvscribe/machine/cpu_load.py). Both are timed
as the batched chunks encode: CTranslate2 on its single-thread replicas a window each
(backends/ctranslate2/replicas.py), onnxruntime a window at a time on every thread. On a
GPU the encoder stays CTranslate2's.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvscribe.atomic_file import atomic_write_text
from kvscribe.backends.ctranslate2.engine_choice import ENCODERS
from kvscribe.errors import BackendUnavailableError, UsageError
from kvscribe.machine import cpu_load
from kvscribe.machine.hardware import cpu_name
from kvscribe.machine.memtrace import release_freed_memory
from kvscribe.models import onnx_encoder
from kvscribe.paths import cache_dir
from kvscribe.staging import made_once, one_maker

CHOICES = ENCODERS
# A round times as many windows as CTranslate2 runs at once (one on each single-thread
# replica, two at most as before); a second round only where the first leaves the two
# within _CLEAR of each other, the faster of the two rounds counting.
_MOST_WINDOWS = 2
_CLEAR = 1.5
_CHOICE_VERSION = 2  # bump when what is timed changes: cached choices are keyed by it
# A timing during which other work kept this much of the cores busy measured the share it
# got, not the encoders: it is kept, and timed again by a run that finds the machine quiet
# (the last minute's load under _QUIET of the cores) once it is _RETIME_AFTER seconds old.
# Not sooner: runs an hour apart choose alike (one test run's processes read one record).
_CONTENDED = 0.25
_QUIET = 0.25
_RETIME_AFTER = 3600.0


class OnnxEncoder:
    """onnxruntime sessions over an encoder graph: one of `threads` intra-op threads for a
    lone window (live mode, `--batch-size 1`, language detection), a window at a time (on
    2 cores faster per window than windows batched into one call), and one of one thread
    (`encode_here`) that encodes a window on the calling thread alone, several threads at
    once: a batch's rows each encoded by the replica that decodes them
    (backends/ctranslate2/group_encoding.py). The two give the same outputs bit for bit
    (tests/test_onnx_encoder.py). The one-thread session is made here, which finds a graph
    onnxruntime cannot read at once; the other at its first use: a batched run told its
    language never needs it (base: 0.04-0.1 s to make)."""

    def __init__(self, graph: Path, threads: int, precision: str):
        self.graph, self.precision, self.threads = graph, precision, threads
        self._single = _session(graph, 1)
        self._every_thread = None
        self._lock = threading.Lock()

    @property
    def session(self):
        """The every-thread session, made at its first use."""
        with self._lock:
            if self._every_thread is None:
                self._every_thread = _session(self.graph, self.threads)
            return self._every_thread

    def __call__(self, features: np.ndarray) -> np.ndarray:
        features = np.ascontiguousarray(features, dtype=np.float32)
        if features.ndim == 2:
            features = features[None]
        session = self.session
        windows = [
            session.run([onnx_encoder.OUTPUT], {onnx_encoder.INPUT: window[None]})[0]
            for window in features
        ]
        return windows[0] if len(windows) == 1 else np.concatenate(windows)

    def encode_here(self, features: np.ndarray) -> np.ndarray:
        """One window's (`[n_mels, frames]`) output `[1, frames / 2, d_model]`, on the calling
        thread alone."""
        window = np.ascontiguousarray(features, dtype=np.float32)[None]
        return self._single.run([onnx_encoder.OUTPUT], {onnx_encoder.INPUT: window})[0]


def _session(graph: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


class OnnxEncodedModel:
    """A CTranslate2 Whisper model whose `encode` runs on onnxruntime: on every thread, or
    (`alone`) a window at a time on the calling thread only."""

    def __init__(self, model, encoder: OnnxEncoder, alone: bool = False):
        self.ctranslate2_model, self.encoder, self._alone = model, encoder, alone

    def alone(self) -> OnnxEncodedModel:
        """The same model, its windows encoded on the calling thread alone."""
        return OnnxEncodedModel(self.ctranslate2_model, self.encoder, alone=True)

    def encode(self, features, to_cpu: bool = False):
        import ctranslate2

        features = np.asarray(features)
        if self._alone:
            windows = features if features.ndim == 3 else features[None]
            encoded = np.concatenate([self.encoder.encode_here(window) for window in windows])
        else:
            encoded = self.encoder(features)
        return ctranslate2.StorageView.from_array(encoded)

    def __getattr__(self, name: str):
        return getattr(self.ctranslate2_model, name)


@dataclass(frozen=True)
class Choice:
    """The encoder a backend runs: `encoder` None means CTranslate2's own; `row` says which
    and why, for the stats."""

    encoder: OnnxEncoder | None
    row: str


@dataclass(frozen=True)
class Candidate:
    """What choose() needs of the backend: its model, threads and compute type, and a way
    to time CTranslate2's encoder as the batched chunks run it (`ct2_encode`: windows in,
    nothing out)."""

    model_dir: Path
    model_name: str
    compute_type: str
    threads: int
    ct2_encode: Callable[[np.ndarray], None]


def choose(setting: str, device: str, candidate: Candidate) -> Choice:
    if setting not in CHOICES:
        raise UsageError(
            f"bad setting [ctranslate2] encoder = {setting!r}",
            hint="one of " + ", ".join(CHOICES),
        )
    if setting == "ctranslate2":
        return Choice(None, "ctranslate2 (the profile's choice)")
    if device != "cpu":
        if setting == "onnxruntime":
            raise BackendUnavailableError(
                "the onnxruntime encoder runs on a CPU only",
                subject="ctranslate2",
                hint='set [ctranslate2] encoder = "auto" or use --device cpu',
            )
        return Choice(None, f"ctranslate2 (on {device})")
    precision = "int8" if candidate.compute_type.startswith("int8") else "float32"
    try:
        graph = cached_graph(candidate.model_dir, candidate.model_name, precision)
        encoder = OnnxEncoder(graph, candidate.threads, precision)
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        if setting == "onnxruntime":
            raise BackendUnavailableError(
                f"the onnxruntime encoder could not be made: {exc}",
                subject="ctranslate2",
                hint='pip install onnx onnxruntime, or set [ctranslate2] encoder = "auto"',
            ) from exc
        return Choice(None, f"ctranslate2 (onnxruntime's encoder unavailable: {exc})")
    if setting == "onnxruntime":
        return Choice(encoder, f"onnxruntime {precision} (the profile's choice)")
    record = _timed(graph, candidate, encoder)
    timed = record["seconds_per_window"]
    ours, theirs = timed["onnxruntime"], timed["ctranslate2"]
    figures = f"{ours:.3f} s a window against CTranslate2's {theirs:.3f}, measured on this machine"
    if _contended(record):
        figures += f" while other work kept {record['other_work']:.0%} of the cores busy"
    if ours < theirs:
        return Choice(encoder, f"onnxruntime {precision} ({figures})")
    return Choice(None, f"ctranslate2 (onnxruntime {precision}: {figures})")


def install(engines: Sequence, setting: str, device: str, candidate: Candidate) -> Choice:
    """Choose the encoder (choose) and, where it is onnxruntime's, put it into each of
    `engines` (faster_whisper.WhisperModel objects) in place, so every copy sharing one
    encodes there too; all of them run the one session."""
    from kvscribe.adapters import faster_whisper as adapter

    choice = choose(setting, device, candidate)
    if choice.encoder is not None:
        for engine in engines:
            adapter.install_model(engine, OnnxEncodedModel(engine.model, choice.encoder))
    return choice


def cached_graph(model_dir: Path, model_name: str, precision: str) -> Path:
    """The encoder graph of this model and precision, written once into the cache (keyed
    by the weights' content and the writer's version)."""
    from kvscribe.models.store import file_digest

    key = file_digest(model_dir / "model.bin")[:16]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in model_name).strip("_.")
    name = f"{safe or 'model'}-encoder-{precision}-v{onnx_encoder.WRITER_VERSION}-{key}.onnx"
    target = cache_dir() / "models" / name
    made_once(target, target.is_file, lambda: onnx_encoder.write(model_dir, target, precision))
    return target


def _timed(graph: Path, candidate: Candidate, encoder: OnnxEncoder) -> dict:
    """The timing's record (`seconds_per_window` for each encoder, `other_work`: the share
    of the cores other work kept busy meanwhile), from the cache or timed now and kept. One
    process times at a time: another kvscribe starting beside it waits and reads its record
    (two timings at once would each share the cores with the other's)."""
    path = cache_dir() / "encoders" / f"{_machine_key(graph, candidate)}.json"
    record = _recorded(path)
    if record is None or _time_again(path, record):
        with one_maker(path):
            record = _recorded(path)
            if record is None or _time_again(path, record):
                record = _time_and_record(path, graph, candidate, encoder)
    return record


def _recorded(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        seconds = record["seconds_per_window"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if isinstance(seconds, dict) else None


def _contended(record: dict) -> bool:
    share = record.get("other_work")
    return isinstance(share, int | float) and share >= _CONTENDED


def _time_again(path: Path, record: dict) -> bool:
    """A contended timing, old enough, on a machine quiet now (_CONTENDED)."""
    if not _contended(record):
        return False
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return False
    return age >= _RETIME_AFTER and cpu_load.quiet(_QUIET)


def _time_and_record(path: Path, graph: Path, candidate: Candidate, encoder: OnnxEncoder) -> dict:
    frames = 3000  # one 30 s window
    count = max(1, min(_MOST_WINDOWS, candidate.threads))
    windows = np.random.default_rng(0).standard_normal(
        (count, _mels(encoder), frames), dtype=np.float32
    )
    with cpu_load.OtherWork() as other:
        timed = _seconds_per_window(
            {"ctranslate2": candidate.ct2_encode, "onnxruntime": encoder}, windows
        )
    release_freed_memory()  # the timing's scratch, so the run's memory figures start clean
    record = {"seconds_per_window": timed, "graph": graph.name, "other_work": other.share}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record))
    return record


def _seconds_per_window(
    encoders: dict[str, Callable[[np.ndarray], object]], windows: np.ndarray
) -> dict[str, float]:
    """Each encoder's seconds a window over `windows`: one round, or the best of two where
    the first leaves them within _CLEAR of each other (the rounds alternate between the
    encoders, so a passing load falls on both). Each is warmed up first on the same windows
    (every replica's first call), CTranslate2 first: its warm-up waits for the replicas
    still loading on a thread of their own, which would otherwise share the cores with the
    other's timing. The warm-ups and the second round were most of a first run's time."""
    for encode in encoders.values():
        encode(windows)  # first-call allocations and kernel choice
    best = dict.fromkeys(encoders, float("inf"))
    for _ in range(2):
        for name, encode in encoders.items():
            start = time.perf_counter()
            encode(windows)
            best[name] = min(best[name], (time.perf_counter() - start) / len(windows))
        if max(best.values()) >= _CLEAR * min(best.values()):
            break
    return best


def _mels(encoder: OnnxEncoder) -> int:
    return int(encoder.session.get_inputs()[0].shape[1])


def _machine_key(graph: Path, candidate: Candidate) -> str:
    """What the timing depends on: the graph, the CPU, the threads, both engines' releases
    and the CTranslate2 path chosen by environment (MKL or oneDNN, instruction set)."""
    import ctranslate2
    import onnxruntime

    parts = [
        f"v{_CHOICE_VERSION}",
        graph.name,
        cpu_name(),
        str(candidate.threads),
        candidate.compute_type,
        ctranslate2.__version__,
        onnxruntime.__version__,
        os.environ.get("CT2_USE_MKL", ""),
        os.environ.get("CT2_FORCE_CPU_ISA", ""),
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]
