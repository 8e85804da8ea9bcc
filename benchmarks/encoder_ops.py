"""Where a window's time goes in the int8 encoder graph kvscribe writes for onnxruntime
(kvscribe/models/onnx_encoder.py): onnxruntime's own profile of each operator kind, on one
thread (as a batched chunk's row is encoded on its replica), over real speech.

    .venv/bin/python benchmarks/encoder_ops.py [--models tiny.en,base] [--out encoder_ops]

Per model: the windows of benchmarks/encoder_engines.py (the first 30 s windows of a real
recording), one warm-up call each, then ROUNDS calls each profiled; the kernel time of
each operator kind, milliseconds a window, and its share of the kernels' sum.

Arithmetic rates, derived (operations counted from the model's dimensions, over the
measured time; a multiply-add is two operations):
- attention: the fused `MultiHeadAttention` kernels' two products per layer (queries x
  keys, weights x values: 2 x 2 x frames^2 x d_model operations), in GFLOP/s;
- int8 linear layers: `MatMulInteger` (the six linear layers of a layer: 12 x frames x
  d_model^2 operations), in GOP/s;
- for scale, a plain float32 `MatMul` of the attention's shape (`[heads, frames,
  d_head] x [heads, d_head, frames]`) timed on the same thread by onnxruntime: the rate
  its float32 matrix kernel reaches on this CPU.
Writes benchmarks/results/OUT.{json,md}.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import results_file
from encoder_engines import SPEECH, windows_of

from kvscribe import models
from kvscribe.models import onnx_encoder
from kvscribe.models.ct2_file import whisper_dims

ROUNDS = 3
TIMED_CALLS = 5  # the float32 MatMul reference


def one_thread_session(graph, profile_prefix: str | None = None):
    """An onnxruntime CPU session of `graph` (a path or serialized bytes) on one thread,
    profiled where `profile_prefix` is given."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


def kernel_ms_by_op(graph: Path, windows: np.ndarray, folder: Path) -> dict[str, float]:
    """Each operator kind's kernel milliseconds a window, from onnxruntime's profile; the
    warm-up calls (one a window) left out: every call of the graph profiles the same
    number of kernels."""
    session = one_thread_session(str(graph), str(folder / "profile"))
    feeds = [{onnx_encoder.INPUT: window[None]} for window in windows]
    for _ in range(1 + ROUNDS):
        for feed in feeds:
            session.run(None, feed)
    events = _node_events(session.end_profiling())
    per_call = len(events) // ((1 + ROUNDS) * len(feeds))
    totals: collections.Counter = collections.Counter()
    for event in events[per_call * len(feeds) :]:
        totals[event["args"]["op_name"]] += event["dur"] / 1000
    calls = ROUNDS * len(feeds)
    return {op: ms / calls for op, ms in totals.most_common()}


def _node_events(profile: str) -> list[dict]:
    events = json.loads(Path(profile).read_text())
    Path(profile).unlink()
    return [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]


def float32_matmul_gflops(heads: int, frames: int, d_head: int) -> float:
    """onnxruntime's float32 MatMul of the attention's shape on one thread, GFLOP/s."""
    from onnx import TensorProto, helper

    def value(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "matmul",
        [value("a", [heads, frames, d_head]), value("b", [heads, d_head, frames])],
        [value("c", [heads, frames, frames])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    session = one_thread_session(model.SerializeToString())
    rng = np.random.default_rng(0)
    feed = {
        "a": rng.standard_normal((heads, frames, d_head), np.float32),
        "b": rng.standard_normal((heads, d_head, frames), np.float32),
    }
    session.run(None, feed)
    start = time.perf_counter()
    for _ in range(TIMED_CALLS):
        session.run(None, feed)
    seconds = (time.perf_counter() - start) / TIMED_CALLS
    return 2 * heads * frames * frames * d_head / seconds / 1e9


def measure(model: str) -> dict:
    model_dir = models.resolve(model, ("ctranslate2",)).path
    dims = whisper_dims(model_dir / "model.bin")
    windows = windows_of(model_dir, SPEECH[model])
    frames, d_model, layers = dims.n_audio_ctx, dims.n_audio_state, dims.n_audio_layer
    with tempfile.TemporaryDirectory() as folder:
        graph = onnx_encoder.write(model_dir, Path(folder) / "int8.onnx", "int8")
        by_op = kernel_ms_by_op(graph, windows, Path(folder))
    attention_ops = 4 * frames * frames * d_model * layers
    linear_ops = 12 * frames * d_model * d_model * layers
    heads = dims.n_audio_head
    return {
        "model": model,
        "ms_per_window_by_op": by_op,
        "kernel_ms_per_window": sum(by_op.values()),
        "attention_gflops_derived": attention_ops / by_op["MultiHeadAttention"] / 1e6,
        "int8_linear_gops_derived": linear_ops / by_op["MatMulInteger"] / 1e6,
        "float32_matmul_gflops_derived": float32_matmul_gflops(heads, frames, d_model // heads),
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        f"Kernel milliseconds a 30 s window by operator kind (onnxruntime's profile, 1 thread, "
        f"{ROUNDS} rounds over the real-speech windows), share of the kernels' sum:",
        "",
    ]
    for row in rows:
        total = row["kernel_ms_per_window"]
        lines += [f"**{row['model']}** ({total:.1f} ms a window in kernels)", ""]
        lines += ["| operator | ms / window | share |", "|---|---|---|"]
        lines += [
            f"| {op} | {ms:.1f} | {ms / total:.0%} |"
            for op, ms in row["ms_per_window_by_op"].items()
            if ms / total >= 0.005
        ]
        lines.append("")
    lines += [
        "Arithmetic rates (derived: operations counted from the model's dimensions over the "
        "measured time):",
        "",
        "| model | attention, float32 (GFLOP/s) | int8 linear layers (GOP/s) | "
        "onnxruntime float32 MatMul of the attention's shape (GFLOP/s) |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['attention_gflops_derived']:.0f} | "
        f"{r['int8_linear_gops_derived']:.0f} | {r['float32_matmul_gflops_derived']:.0f} |"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny.en,base")
    parser.add_argument("--out", default="encoder_ops")
    args = parser.parse_args()
    rows = [measure(model) for model in args.models.split(",")]
    table = markdown(rows)
    print(table)
    meta = {
        "device": "cpu",
        "threads": 1,
        "rounds": ROUNDS,
        "units": "milliseconds: onnxruntime's kernel time per 30 s window (wall clock, one "
        "thread); GFLOP/s and GOP/s: derived, 10^9 operations a second",
    }
    results_file.write(args.out, meta, rows, table)


if __name__ == "__main__":
    main()
