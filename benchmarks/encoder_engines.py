"""Whisper's audio encoder on CTranslate2 against the graph kvscribe writes for onnxruntime
(kvscribe/models/onnx_encoder.py, run by backends/ctranslate2/encoder.py): time a window,
and error against CTranslate2's float32 encoder on real speech.

    .venv/bin/python benchmarks/encoder_engines.py [--models tiny.en,base] [--threads 2]
        [--out encoder_engines]

Per model, in this process, `--threads` threads, 30 s windows of real speech (the realform
English recording's first windows for tiny.en, the French one's for base), each engine
warmed up on one window first, then the windows timed one call each, three rounds; the
median round's seconds a window:
- ct2-int8-whole: CTranslate2 int8, one engine with every thread, a window a call (how
  `--batch-size 1` and live mode encode).
- ct2-int8-replicas: CTranslate2 int8 on single-thread replicas, one window each at once
  (how the batched chunks encode; backends/ctranslate2/replicas.py).
- ct2-float32-whole: CTranslate2 float32.
- ort-int8, ort-float32: kvscribe's graph on onnxruntime, a window a call on every thread
  (how OnnxEncoder runs).
- ort-int8-per-tensor: the float32 graph through onnxruntime's own dynamic quantization
  (`quantize_dynamic`, one scale per activation matrix), for the accuracy column only.
Error: mean and largest absolute difference from ct2-float32 over the windows' outputs,
against the mean magnitude of that output.
Writes benchmarks/results/OUT.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import results_file

from kvscribe import models
from kvscribe.audio import load_audio
from kvscribe.backends.ctranslate2.encoder import OnnxEncoder
from kvscribe.models import onnx_encoder

EVAL = Path(__file__).resolve().parent.parent / "eval" / "realform"
SPEECH = {"tiny.en": EVAL / "asterisk_en_ivr_dev.wav", "base": EVAL / "asterisk_fr_ivr_dev.wav"}
WINDOWS = 4
ROUNDS = 3


def windows_of(model_dir: Path, audio_path: Path) -> np.ndarray:
    """The recording's first WINDOWS 30 s windows as log-mel, [WINDOWS, n_mels, 3000]."""
    from faster_whisper import WhisperModel

    from kvscribe.adapters import faster_whisper as adapter

    engine = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=1)
    audio = load_audio(audio_path)
    step = 30 * 16000
    return np.stack(
        [adapter.window_features(engine, audio[i * step : (i + 1) * step]) for i in range(WINDOWS)]
    )


def ct2_engines(model_dir: Path, threads: int) -> dict:
    import ctranslate2

    def whole(compute_type: str):
        model = ctranslate2.models.Whisper(
            str(model_dir), device="cpu", compute_type=compute_type, intra_threads=threads
        )
        return lambda batch: [
            np.asarray(model.encode(_storage(w[None]), to_cpu=True)) for w in batch
        ]

    replicas = ctranslate2.models.Whisper(
        str(model_dir), device="cpu", compute_type="int8", inter_threads=threads, intra_threads=1
    )
    pool = ThreadPoolExecutor(threads)

    def on_replicas(batch):
        return list(pool.map(lambda w: np.asarray(replicas.encode(_storage(w[None]))), batch))

    return {
        "ct2-int8-whole": whole("int8"),
        "ct2-int8-replicas": on_replicas,
        "ct2-float32-whole": whole("float32"),
    }


def _storage(array: np.ndarray):
    import ctranslate2

    return ctranslate2.StorageView.from_array(np.ascontiguousarray(array))


def ort_engines(model_dir: Path, threads: int, folder: Path) -> dict:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    engines = {}
    for precision in onnx_encoder.PRECISIONS:
        graph = onnx_encoder.write(model_dir, folder / f"{precision}.onnx", precision)
        encoder = OnnxEncoder(graph, threads, precision)
        engines[f"ort-{precision}"] = lambda batch, e=encoder: [e(w[None]) for w in batch]
    per_tensor = folder / "per_tensor.onnx"
    quantize_dynamic(
        folder / "float32.onnx",
        per_tensor,
        op_types_to_quantize=["MatMul"],
        weight_type=QuantType.QInt8,
        # the linear layers, as the int8 graph; the contrib attention defeats shape inference
        extra_options={"MatMulConstBOnly": True, "DefaultTensorType": 1},
    )
    encoder = OnnxEncoder(per_tensor, threads, "int8")
    engines["ort-int8-per-tensor"] = lambda batch: [encoder(w[None]) for w in batch]
    return engines


def measure(model: str, threads: int) -> list[dict]:
    model_dir = models.resolve(model, ("ctranslate2",)).path
    windows = windows_of(model_dir, SPEECH[model])
    with tempfile.TemporaryDirectory() as folder:
        engines = {
            **ct2_engines(model_dir, threads),
            **ort_engines(model_dir, threads, Path(folder)),
        }
        outputs = {name: np.concatenate(run(windows)) for name, run in engines.items()}
        exact = outputs["ct2-float32-whole"]
        rows = []
        for name, run in engines.items():
            run(windows[:1])
            rounds = []
            for _ in range(ROUNDS):
                start = time.perf_counter()
                run(windows)
                rounds.append((time.perf_counter() - start) / len(windows))
            error = np.abs(outputs[name] - exact)
            rows.append(
                {
                    "model": model,
                    "engine": name,
                    "seconds_per_window": statistics.median(rounds),
                    "rounds": rounds,
                    "mean_abs_error": float(error.mean()),
                    "max_abs_error": float(error.max()),
                    "output_mean_magnitude": float(np.abs(exact).mean()),
                    "timed": name != "ort-int8-per-tensor",
                }
            )
    return rows


def markdown(rows: list[dict], threads: int) -> str:
    lines = [
        f"Seconds a 30 s window (median of {ROUNDS} rounds of {WINDOWS} real-speech windows), "
        f"{threads} threads; error against CTranslate2 float32's output.",
        "",
        "| model | encoder | s / window | x ct2-int8-replicas | mean abs error | max abs error |",
        "|---|---|---|---|---|---|",
    ]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        base = next(r for r in mine if r["engine"] == "ct2-int8-replicas")["seconds_per_window"]
        for r in mine:
            seconds = r["seconds_per_window"]
            shown = f"{seconds:.3f}" if r["timed"] else f"({seconds:.3f})"
            lines.append(
                f"| {model} | {r['engine']} | {shown} | {seconds / base:.2f} | "
                f"{r['mean_abs_error']:.4f} | {r['max_abs_error']:.3f} |"
            )
    magnitudes = {r["model"]: r["output_mean_magnitude"] for r in rows}
    lines += [
        "",
        "Mean output magnitude: " + ", ".join(f"{m} {v:.3f}" for m, v in magnitudes.items()),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny.en,base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="encoder_engines")
    args = parser.parse_args()
    rows = [row for model in args.models.split(",") for row in measure(model, args.threads)]
    table = markdown(rows, args.threads)
    print(table)
    meta = {
        "device": "cpu",
        "threads": args.threads,
        "windows": WINDOWS,
        "rounds": ROUNDS,
        "speech": {m: str(p.relative_to(EVAL.parent.parent)) for m, p in SPEECH.items()},
        "units": "seconds: wall clock per 30 s window; error: absolute difference of encoder "
        "outputs (hidden states, no unit) from CTranslate2 float32's",
    }
    results_file.write(args.out, meta, rows, table)


if __name__ == "__main__":
    main()
