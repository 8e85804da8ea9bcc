"""Other ways onnxruntime could run the encoder's two costliest pieces, each timed against the
way kvscribe's int8 graph runs it (kvscribe/models/onnx_encoder.py), on one thread.

    .venv/bin/python benchmarks/encoder_op_variants.py [--model tiny.en] [--out NAME]

The model's shapes (a 30 s window: 1500 positions), random inputs (the linear layer's with
one channel 20x the others: real activations have such outliers), each variant warmed up once, then
CALLS calls timed; the median of ROUNDS rounds. Error: mean absolute difference from
float32 numpy over the mean magnitude of its result.

An int8 linear layer (the first feed-forward layer: `[1500, d_model] x [d_model,
4 d_model]`):
- kvscribe: each row scaled to int8 by its own largest value (Abs, ReduceMax, Div, Mul,
  QuantizeLinear), MatMulInteger with per-column int8 weights, Cast, the two scales
  multiplied in.
- per-axis: the same arithmetic with QuantizeLinear's and DequantizeLinear's per-axis
  scales in place of the Mul nodes.
- MatMulNBits: onnxruntime's fused weight-only kernel, 8-bit weights in blocks of 32
  (accuracy level 4: activations quantized to int8 inside it).
- float32: a plain MatMul.
Attention (one layer, every head: queries x keys, softmax, x values):
- MultiHeadAttention: onnxruntime's fused float32 kernel (kvscribe's graph).
- int8 queries x keys: queries and keys quantized per row, MatMulInteger, rescaled, then
  softmax and the values' product in float32.
- float32 MatMul nodes: the same without the fused kernel.
- queries x keys alone, in float32 and in float16: that product's speed in each.
Writes benchmarks/results/OUT.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import results_file
from encoder_ops import one_thread_session

from kvscribe import models
from kvscribe.models import onnx_encoder
from kvscribe.models.ct2_file import whisper_dims

CALLS, ROUNDS = 5, 3
BLOCK = 32  # MatMulNBits' block along the inner dimension
_OUTLIER = 20.0


class Graph:
    """An onnx graph built node by node: float32 inputs, one output."""

    def __init__(self):
        self.nodes, self.initializers = [], []

    def op(self, kind: str, inputs: list[str], domain: str = "", **attributes) -> str:
        from onnx import helper

        name = f"{kind.lower()}_{len(self.nodes)}"
        self.nodes.append(
            helper.make_node(kind, inputs, [name], domain=domain or None, **attributes)
        )
        return name

    def const(self, array) -> str:
        from onnx import numpy_helper

        name = f"c{len(self.initializers)}"
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def session(self, inputs: dict[str, tuple], output: str, dtype: int = 1):
        return session_of(self.nodes, self.initializers, inputs, output, dtype)

    def row_quantized(self, x: str, zero_point) -> tuple[str, str]:
        """x's rows each scaled so its largest magnitude is 127, as uint8 around
        `zero_point`; and the rows' scales."""
        largest = self.op(
            "Max",
            [
                self.op("ReduceMax", [self.op("Abs", [x]), self.const([-1])], keepdims=1),
                self.const(np.float32(1e-8)),
            ],
        )
        scale = self.op("Div", [largest, self.const(np.float32(127))])
        scaled = self.op("Mul", [x, self.op("Div", [self.const(np.float32(127)), largest])])
        return self.op("QuantizeLinear", [scaled, self.const(np.float32(1)), zero_point]), scale


def session_of(nodes, initializers, inputs: dict[str, tuple], output: str, dtype: int = 1):
    """A one-thread session of a graph of `nodes`: `inputs` of `dtype`, one output."""
    from onnx import helper

    values = [helper.make_tensor_value_info(n, dtype, s) for n, s in inputs.items()]
    result = helper.make_tensor_value_info(output, dtype, None)
    graph = helper.make_graph(nodes, "variant", values, [result], initializers)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    return one_thread_session(model.SerializeToString())


def linear_variants(weight: np.ndarray) -> dict:
    rows, inner = 1500, weight.shape[0]
    shape = {"x": (1, rows, inner)}
    quantized, column_scale = onnx_encoder.quantized_columns(weight)
    variants = {}

    kvscribe = onnx_encoder.GraphBuilder({}, int8=True)  # the encoder graph's own nodes
    out = kvscribe.int8_product("fc1", "x", weight)
    variants["kvscribe: per-row quantize, MatMulInteger, rescale"] = session_of(
        kvscribe.nodes, kvscribe.initializers, shape, out
    )

    g = Graph()
    largest = g.op("ReduceMax", [g.op("Abs", ["x"]), g.const([-1])], keepdims=1)
    row_scale = g.op(
        "Div", [g.op("Max", [largest, g.const(np.float32(1e-8))]), g.const(np.float32(127))]
    )
    flat = g.op("Reshape", [row_scale, g.const([-1])])
    zeros = g.op("Add", [g.op("Mul", [flat, g.const(np.float32(0))]), g.const(np.float32(128))])
    q = g.op("QuantizeLinear", ["x", flat, g.op("Cast", [zeros], to=2)], axis=1)
    product = g.op("MatMulInteger", [q, g.const(quantized), g.const(np.uint8(128))])
    out = g.op(
        "Mul", [g.op("DequantizeLinear", [product, g.const(column_scale)], axis=2), row_scale]
    )
    variants["per-axis QuantizeLinear and DequantizeLinear"] = g.session(shape, out)

    g = Graph()
    blocks = weight.T.reshape(weight.shape[1], inner // BLOCK, BLOCK)
    block_scale = (np.abs(blocks).max(axis=-1) / 127).astype(np.float32)
    packed = (np.clip(np.round(blocks / block_scale[..., None]), -127, 127) + 128).astype(np.uint8)
    out = g.op(
        "MatMulNBits",
        ["x", g.const(packed), g.const(block_scale.reshape(-1))],
        domain="com.microsoft",
        K=inner,
        N=weight.shape[1],
        bits=8,
        block_size=BLOCK,
        accuracy_level=4,
    )
    variants["MatMulNBits, 8-bit weights, int8 compute"] = g.session(shape, out)

    g = Graph()
    variants["float32 MatMul"] = g.session(shape, g.op("MatMul", ["x", g.const(weight)]))
    return variants


def attention_variants(heads: int, d_head: int) -> dict:
    positions = 1500
    per_head = {n: (heads, positions, d_head) for n in ("q", "k", "v")}
    scale = np.float32(d_head**-0.5)
    variants = {}

    g = Graph()
    flat = {n: (1, positions, heads * d_head) for n in ("q", "k", "v")}
    out = g.op("MultiHeadAttention", ["q", "k", "v"], domain="com.microsoft", num_heads=heads)
    variants["MultiHeadAttention (fused, float32)"] = (g.session(flat, out), True)

    g = Graph()
    middle = g.const(np.uint8(128))
    q, q_scale = g.row_quantized("q", middle)
    k, k_scale = g.row_quantized("k", middle)
    keys = g.op("Transpose", [k], perm=[0, 2, 1])
    scores = g.op("Cast", [g.op("MatMulInteger", [q, keys, middle, middle])], to=1)
    scales = g.op("Mul", [q_scale, g.op("Transpose", [k_scale], perm=[0, 2, 1])])
    scores = g.op("Mul", [scores, g.op("Mul", [scales, g.const(scale)])])
    out = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), "v"])
    variants["queries x keys in int8, the rest float32"] = (g.session(per_head, out), False)

    g = Graph()
    scores = g.op("MatMul", ["q", g.op("Transpose", ["k"], perm=[0, 2, 1])])
    weights = g.op("Softmax", [g.op("Mul", [scores, g.const(scale)])], axis=-1)
    variants["float32 MatMul nodes"] = (g.session(per_head, g.op("MatMul", [weights, "v"])), False)

    pair = {n: per_head[n] for n in ("q", "k")}
    for name, dtype in (("float32", 1), ("float16", 10)):
        g = Graph()
        out = g.op("MatMul", ["q", g.op("Transpose", ["k"], perm=[0, 2, 1])])
        variants[f"{name} queries x keys alone"] = (g.session(pair, out, dtype), dtype)
    return variants


def timed(session, feed: dict) -> tuple[float, np.ndarray]:
    result = session.run(None, feed)[0]
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            session.run(None, feed)
        rounds.append((time.perf_counter() - start) / CALLS)
    return statistics.median(rounds), result


def _inputs(rng, shape) -> np.ndarray:
    array = rng.standard_normal(shape).astype(np.float32)
    array[..., 5] *= _OUTLIER
    return array


def measure(model: str) -> list[dict]:
    dims = whisper_dims(models.resolve(model, ("ctranslate2",)).path / "model.bin")
    d_model, heads = dims.n_audio_state, dims.n_audio_head
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((d_model, 4 * d_model)) * d_model**-0.5).astype(np.float32)
    x = _inputs(rng, (1, 1500, d_model))
    exact = x @ weight
    rows = []
    for name, session in linear_variants(weight).items():
        seconds, result = timed(session, {"x": x})
        rows.append(_row(model, "int8 linear layer", name, seconds, result, exact))
    # no outlier here: scores 400x wider would underflow the softmax's exponentials into
    # subnormal numbers, which slow every variant down (177 ms a call against 21)
    q, k, v = (rng.standard_normal((heads, 1500, d_model // heads), np.float32) for _ in "qkv")
    scores = q @ k.transpose(0, 2, 1) * (d_model // heads) ** -0.5
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    exact = (weights / weights.sum(-1, keepdims=True)) @ v
    for name, (session, flat) in attention_variants(heads, d_model // heads).items():
        feed = {"q": q, "k": k, "v": v}
        if not isinstance(flat, bool):  # a product alone, for its speed: no error column
            dtype = np.float16 if flat == 10 else np.float32
            feed = {"q": q.astype(dtype), "k": k.astype(dtype)}
            seconds, _ = timed(session, feed)
            rows.append(_row(model, "attention", name, seconds, None, None))
            continue
        if flat:
            feed = {n: a.transpose(1, 0, 2).reshape(1, 1500, d_model) for n, a in feed.items()}
        seconds, result = timed(session, feed)
        if flat:
            result = result.reshape(1500, heads, d_model // heads).transpose(1, 0, 2)
        rows.append(_row(model, "attention", name, seconds, result, exact))
    return rows


def _row(model, piece, variant, seconds, result, exact) -> dict:
    error = None
    if result is not None:
        error = float(np.abs(result - exact).mean() / np.abs(exact).mean())
    return {
        "model": model,
        "piece": piece,
        "variant": variant,
        "ms": seconds * 1000,
        "error": error,
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        f"One thread, the median of {ROUNDS} rounds of {CALLS} calls; error against float32 "
        "numpy (mean absolute difference over the mean magnitude).",
        "",
        "| model | piece | variant | ms a call | x kvscribe's way | error |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        mine = [r for r in rows if r["model"] == row["model"] and r["piece"] == row["piece"]]
        error = "-" if row["error"] is None else f"{row['error']:.4f}"
        lines.append(
            f"| {row['model']} | {row['piece']} | {row['variant']} | {row['ms']:.2f} | "
            f"{row['ms'] / mine[0]['ms']:.2f} | {error} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--out", default="encoder_op_variants")
    args = parser.parse_args()
    rows = measure(args.model)
    table = markdown(rows)
    print(table)
    meta = {
        "device": "cpu",
        "threads": 1,
        "units": "milliseconds: wall clock a call, one thread; error: relative, no unit",
    }
    results_file.write(args.out, meta, rows, table)


if __name__ == "__main__":
    main()
