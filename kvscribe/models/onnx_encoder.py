"""Whisper's audio encoder as an ONNX graph, written from a CTranslate2 model's own weights.

onnxruntime runs this graph faster than CTranslate2 runs its own encoder on the CPUs
measured (benchmarks/results/encoder_engines*.md), and faster-whisper's install already
brings onnxruntime (its VAD runs on it). The graph is built node by node from the weights
in `model.bin` with the `onnx` package (no PyTorch, no export tracer). It ends at the
encoder's hidden states (`[batch, frames / 2, d_model]`, what CTranslate2's `generate`,
`align` and `detect_language` take in place of features) and reads any window of at most
30 s: the positional embedding is sliced to the frames given, as CTranslate2's encoder
slices it.

Two precisions:
- float32: the weights as stored, widened.
- int8: the linear layers quantized as CTranslate2 quantizes them, int8 weights with one
  scale per output channel and activations quantized per row (per audio position) at
  run time. onnxruntime's own dynamic quantization scales a whole activation matrix at
  once; on real speech that doubled the encoder's error against float32 and the WER of
  the joined real clips (0.045 to 0.089), where per-row scales match CTranslate2's int8
  error. The convolutions, attention, norms and residual stream stay float32.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from kvscribe.models.ct2_file import WhisperDims, whisper_dims
from kvscribe.staging import staging_file

WRITER_VERSION = 1  # bump when the graph written changes: cached graphs are keyed by it
PRECISIONS = ("int8", "float32")
INPUT, OUTPUT = "features", "encoded"
_OPSET = 20  # Gelu is a standard operator from opset 20
_CONTRIB = "com.microsoft"  # onnxruntime's MultiHeadAttention: one fused kernel
_LAYER_NORM_EPSILON = 1e-5
_INT8_MAX = 127.0


def write(ct2_dir: Path, target: Path, precision: str) -> Path:
    """Write the encoder graph of the CTranslate2 model in `ct2_dir` to `target` (a .onnx
    file) atomically: a half-written graph is never left at `target`."""
    import onnx

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {PRECISIONS}")
    dims = whisper_dims(ct2_dir / "model.bin")
    model = GraphBuilder(_encoder_weights(ct2_dir, dims), precision == "int8").encoder(dims)
    staging = staging_file(target)
    try:
        onnx.save(model, str(staging))
        os.replace(staging, target)
    finally:
        Path(staging).unlink(missing_ok=True)
    return target


def _encoder_weights(ct2_dir: Path, dims: WhisperDims) -> dict[str, np.ndarray]:
    """The encoder's weights in transformers' names, float32."""
    from kvscribe.models.ct2_to_hf import iter_hf_tensors

    return {
        name.removeprefix("model.encoder."): np.asarray(array, dtype=np.float32)
        for name, array in iter_hf_tensors(ct2_dir, dims)
        if name.startswith("model.encoder.")
    }


def quantized_columns(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`weight` ([in, out]) as int8 with one float32 scale per output column (symmetric:
    the column's largest magnitude maps to 127), as CTranslate2 quantizes a linear layer."""
    scale = np.abs(weight).max(axis=0) / _INT8_MAX
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    quantized = np.clip(np.round(weight / scale), -_INT8_MAX, _INT8_MAX).astype(np.int8)
    return quantized, scale


class GraphBuilder:
    """Adds nodes one operation at a time; each output is named after its node (also used
    by benchmarks/encoder_op_variants.py to time one int8 linear layer as the graph runs it)."""

    def __init__(self, weights: dict[str, np.ndarray], int8: bool):
        self.weights, self.int8 = weights, int8
        self.nodes: list = []
        self.initializers: list = []
        self.constants: set[str] = set()

    def encoder(self, dims: WhisperDims):
        from onnx import TensorProto, helper

        x = self.gelu(self.conv("conv1", INPUT, stride=1))
        x = self.gelu(self.conv("conv2", x, stride=2))
        x = self.op("Transpose", [x], perm=[0, 2, 1])  # [batch, positions, width]
        x = self.op("Add", [x, self.positions(x)])
        for layer in range(dims.n_audio_layer):
            x = self.block(f"layers.{layer}", x, dims.n_audio_state, dims.n_audio_head)
        x = self.layer_norm("layer_norm", x)
        self.nodes.append(_node("Identity", [x], [OUTPUT], OUTPUT))
        features = ["batch", dims.n_mels, "frames"]
        encoded = ["batch", "positions", dims.n_audio_state]
        graph = helper.make_graph(
            self.nodes,
            "whisper_encoder",
            [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, features)],
            [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, encoded)],
            self.initializers,
        )
        opsets = [helper.make_opsetid("", _OPSET), helper.make_opsetid(_CONTRIB, 1)]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 9  # read by every onnxruntime release since 1.16
        return model

    # -- layers ----------------------------------------------------------------------------

    def block(self, prefix: str, x: str, width: int, heads: int) -> str:
        normed = self.layer_norm(f"{prefix}.self_attn_layer_norm", x)
        x = self.op("Add", [x, self.attention(f"{prefix}.self_attn", normed, width, heads)])
        normed = self.layer_norm(f"{prefix}.final_layer_norm", x)
        hidden = self.gelu(self.linear(f"{prefix}.fc1", normed))
        return self.op("Add", [x, self.linear(f"{prefix}.fc2", hidden)])

    def attention(self, prefix: str, x: str, width: int, heads: int) -> str:
        """Multi-head self-attention, q, k and v from one matrix product (Whisper's key has
        no bias: zeros in the joined one) and the heads in onnxruntime's fused kernel
        (scaled by 1/sqrt(head width), as Whisper scales them)."""
        weight = np.concatenate(
            [self.weights[f"{prefix}.{p}_proj.weight"] for p in ("q", "k", "v")]
        )
        bias = np.concatenate(
            [
                self.weights[f"{prefix}.q_proj.bias"],
                np.zeros(width, np.float32),
                self.weights[f"{prefix}.v_proj.bias"],
            ]
        )
        qkv = self.linear(f"{prefix}.qkv", x, weight, bias)
        q, k, v = (f"{prefix}.{p}" for p in "qkv")
        split = self.const(f"{prefix}.split", np.array([width] * 3, np.int64))
        self.nodes.append(_node("Split", [qkv, split], [q, k, v], f"{prefix}.split", axis=-1))
        context = f"{prefix}.context"
        self.nodes.append(
            _node("MultiHeadAttention", [q, k, v], [context], context, _CONTRIB, num_heads=heads)
        )
        return self.linear(f"{prefix}.out_proj", context)

    def positions(self, x: str) -> str:
        """The positional embedding's first rows, as many as `x` has positions."""
        table = self.const("embed_positions", self.weights["embed_positions.weight"])
        axis = self.const("axis.1", np.array([1], np.int64))
        length = self.op("Gather", [self.op("Shape", [x]), axis])
        start = self.const("zero", np.array([0], np.int64))
        return self.op("Slice", [table, start, length, start])

    def conv(self, name: str, x: str, stride: int) -> str:
        weight = self.const(f"{name}.weight", self.weights[f"{name}.weight"])
        bias = self.const(f"{name}.bias", self.weights[f"{name}.bias"])
        return self.op("Conv", [x, weight, bias], pads=[1, 1], strides=[stride])

    def linear(self, name: str, x: str, weight=None, bias=None) -> str:
        weight = self.weights[f"{name}.weight"] if weight is None else weight
        bias = self.weights.get(f"{name}.bias") if bias is None else bias
        transposed = np.ascontiguousarray(weight.T)  # [in, out]
        if self.int8:
            product = self.int8_product(name, x, transposed)
        else:
            product = self.op("MatMul", [x, self.const(f"{name}.weight_t", transposed)])
        if bias is None:
            return product
        return self.op("Add", [product, self.const(f"{name}.bias", bias)])

    def int8_product(self, name: str, x: str, weight: np.ndarray) -> str:
        """x @ weight with int8 weights (a scale per column) and x quantized per row: each
        row scaled so its largest magnitude is 127, stored as uint8 around 128, the
        integer product rescaled by the row's and the column's scales."""
        quantized, column_scale = quantized_columns(weight)
        row_max = self.op(
            "Max",
            [
                self.op(
                    "ReduceMax",
                    [self.op("Abs", [x]), self.const("axis.last", np.array([-1], np.int64))],
                    keepdims=1,
                ),
                self.const("tiny", np.array(1e-8, np.float32)),
            ],
        )
        int8_max = self.const("int8.max", np.array(_INT8_MAX, np.float32))
        row_scale = self.op("Div", [row_max, int8_max])
        scaled = self.op("Mul", [x, self.op("Div", [int8_max, row_max])])
        one = self.const("one", np.array(1.0, np.float32))
        middle = self.const("uint8.middle", np.array(128, np.uint8))
        rows = self.op("QuantizeLinear", [scaled, one, middle])  # rounds half to even
        product = self.op(
            "MatMulInteger", [rows, self.const(f"{name}.weight_int8", quantized), middle]
        )
        product = self.op("Cast", [product], to=1)  # TensorProto.FLOAT
        product = self.op("Mul", [product, row_scale])
        return self.op("Mul", [product, self.const(f"{name}.weight_scale", column_scale)])

    def layer_norm(self, name: str, x: str) -> str:
        gamma = self.const(f"{name}.weight", self.weights[f"{name}.weight"])
        beta = self.const(f"{name}.bias", self.weights[f"{name}.bias"])
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=_LAYER_NORM_EPSILON)

    def gelu(self, x: str) -> str:
        return self.op("Gelu", [x])  # the exact (erf) GELU, Whisper's

    # -- nodes -----------------------------------------------------------------------------

    def op(self, kind: str, inputs: list[str], **attributes) -> str:
        name = f"{kind.lower()}_{len(self.nodes)}"
        self.nodes.append(_node(kind, inputs, [name], name, **attributes))
        return name

    def const(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        if name not in self.constants:  # shared shapes and scalars are added once
            self.constants.add(name)
            self.initializers.append(numpy_helper.from_array(array, name))
        return name


def _node(
    kind: str, inputs: list[str], outputs: list[str], name: str, domain: str = "", **attributes
):
    from onnx import helper

    return helper.make_node(kind, inputs, outputs, name=name, domain=domain or None, **attributes)
