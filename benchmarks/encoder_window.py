"""Whether a live decode could encode only its buffer instead of a whole 30 s window.

    .venv/bin/python benchmarks/encoder_window.py

CTranslate2's Whisper encoder takes fewer than 3000 log-mel frames (whisper.cpp's
`audio_ctx` idea): a shorter window costs less to encode (on 2 cores: 0.04 s for 11 s
against 0.2 s for 30 s) and to attend over. Whisper was trained on 30 s windows only, so
this measures what it costs in words before live mode (docs/live.md) uses it.

Each utterance of the realform English clips (clean and over a noise floor; silero VAD,
cut at pauses of 0.7 s as live mode cuts them, 0.2 s of padding each side) is decoded
alone in this process as live mode decodes a buffer (ctranslate2, cpu-laptop, beam 5,
live mode's token bound); and each real short clip of eval/clips whole. Windows: the
whole 30 s, or max(buffer + margin, floor) seconds. WER pooled per set (the utterances'
texts joined in order); decode seconds summed (in process, one pass: a guide).
Writes benchmarks/results/encoder_window.{json,md}.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import results_file

from kvscribe import models, profile, registry
from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.bench.wer import pooled_wer
from kvscribe.live.session import _TOKENS_BASE, _TOKENS_PER_SECOND
from kvscribe.options import LiveOptions
from kvscribe.runner import decode_request
from kvscribe.voice.silero import WINDOW, SileroVad, VadSettings

EVAL = Path(__file__).resolve().parent.parent / "eval"
REALFORM = ("asterisk_en_ivr_dev", "asterisk_en_ivr_dev_noisy")
WINDOWS = {  # name -> (floor, margin) in seconds; None: the whole 30 s window
    "30 s (as now)": None,
    "buffer + 2 s, at least 20 s": (20.0, 2.0),
    "buffer + 2 s, at least 15 s": (15.0, 2.0),
    "buffer + 2 s, at least 10 s": (10.0, 2.0),
    "buffer + 2 s, at least 5 s": (5.0, 2.0),
}
PAUSE, PAD = 0.7, int(0.2 * SAMPLE_RATE)


def speech_spans(samples: np.ndarray) -> list[tuple[int, int]]:
    """(first, end) sample of each utterance of `samples`: speech cut at pauses of PAUSE
    seconds, padded by PAD samples."""
    speech = np.flatnonzero(SileroVad().probabilities(samples) >= VadSettings().threshold)
    breaks = np.flatnonzero(np.diff(speech) * WINDOW >= PAUSE * SAMPLE_RATE)
    firsts, lasts = speech[np.r_[0, breaks + 1]], speech[np.r_[breaks, speech.size - 1]]
    spans = zip(firsts * WINDOW - PAD, (lasts + 1) * WINDOW + PAD, strict=True)
    return [(max(0, int(a)), min(samples.size, int(b))) for a, b in spans]


def utterances(samples: np.ndarray) -> list[np.ndarray]:
    """The speech of `samples` cut at pauses of PAUSE seconds, padded by PAD samples."""
    return [samples[a:b] for a, b in speech_spans(samples)]


class Windowed:
    """The backend's engine encoding only the first `frames` log-mel frames of a window
    (faster-whisper pads every window to 3000 before it encodes)."""

    def __init__(self, backend):
        self.engine = backend.engine
        self.encode = type(self.engine).encode
        self.frames: int | None = None
        self.engine.encode = self._encode

    def _encode(self, features):
        if self.frames is not None:
            features = np.ascontiguousarray(features[..., : self.frames])
        return self.encode(self.engine, features)

    def fit(self, seconds: float, window: tuple[float, float] | None) -> None:
        if window is None:
            self.frames = None
            return
        floor, margin = window
        self.frames = min(3000, 2 * math.ceil(max(seconds + margin, floor) * 50))


def decode_all(backend, windowed: Windowed, pieces, window) -> tuple[str, float]:
    request = decode_request(LiveOptions(source="replay.wav", paced=False))
    texts, seconds = [], 0.0
    for piece in pieces:
        duration = piece.size / SAMPLE_RATE
        bound = int(duration * _TOKENS_PER_SECOND) + _TOKENS_BASE
        windowed.fit(duration, window)
        started = time.perf_counter()
        run = backend.transcribe(piece, dataclasses.replace(request, max_new_tokens=bound))
        texts.append(" ".join(segment.text.strip() for segment in run.segments))
        seconds += time.perf_counter() - started
    return " ".join(texts), seconds


def main() -> None:
    backend_cls = registry.get("ctranslate2")
    model = models.resolve(None, backend_cls.capabilities.model_formats)
    backend = backend_cls(model, profile.load("cpu-laptop"), "cpu")
    backend.load()
    windowed = Windowed(backend)
    sets = {}
    for name in REALFORM:
        path = EVAL / "realform" / f"{name}.wav"
        sets[name] = [(path.with_suffix(".txt"), utterances(load_audio(path)))]
    real = [
        line.split("\t")[0]
        for line in (EVAL / "MANIFEST.tsv").read_text().splitlines()[1:]
        if line.split("\t")[4] == "real" and line.startswith("clips/")
    ]
    sets["eval real short clips"] = [
        ((EVAL / clip).with_suffix(".txt"), [load_audio(EVAL / clip)]) for clip in real
    ]
    rows = []
    for window_name, window in WINDOWS.items():
        for set_name, members in sets.items():
            pairs, seconds, pieces = [], 0.0, 0
            for reference, parts in members:
                text, spent = decode_all(backend, windowed, parts, window)
                pairs.append((reference.read_text(encoding="utf-8"), text))
                seconds, pieces = seconds + spent, pieces + len(parts)
            rows.append(
                {
                    "window": window_name,
                    "set": set_name,
                    "pieces": pieces,
                    "wer": pooled_wer(pairs),
                    "decode_seconds": seconds,
                }
            )
            print(f"{window_name} | {set_name}: WER {rows[-1]['wer']:.3f}, {seconds:.1f} s")
    table = _table(rows)
    print("\n" + table)
    meta = {"model": "tiny.en", "device": "cpu", "profile": "cpu-laptop", "backend": "ctranslate2"}
    results_file.write("encoder_window", meta, rows, table)


def _table(rows: list[dict]) -> str:
    return (
        "Each piece decoded alone in this process, as live mode decodes a buffer "
        "(ctranslate2, cpu-laptop, beam 5); one pass.\n\n"
        + results_file.grid(
            rows,
            across="set",
            down="window",
            corner="encoder window",
            head=lambda row: f"{row['set']} ({row['pieces']}): WER, decode s",
            cell=lambda row: f"{row['wer']:.3f}, {row['decode_seconds']:.1f}",
        )
    )


if __name__ == "__main__":
    main()
