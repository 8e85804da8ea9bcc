"""Trace kvscribe's torch modules (backends/onnx/graphs.py) into ONNX files, make their int8
copies, and read back what a written graph's inputs and outputs are.

The exporter is torch's TorchScript one (`torch.onnx.export(..., dynamo=False)`, opset 17).
With torch 2.13 both exporters give the same named dynamic axes (rows, new, kept_<layer>,
chunks) and the same logits in onnxruntime; this one needs no onnxscript (nor its
onnx_ir), and it traced the step graph several times faster. torch marks it deprecated: if
a later torch drops it, `dynamo=True` with `dynamic_shapes` took these modules unchanged.

Example sizes are all different from each other and above 1 (rows 4, new 3, chunks 2,
kept 2..): the trace records shape arithmetic as graph operations, and distinct sizes make
a mix-up between two axes show up as a wrong shape in the export's own check.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch

from kvscribe.backends.onnx.graphs import DecoderStep, EncoderGraph

OPSET = 17
EXPORTER = "torch.onnx.export (TorchScript, dynamo=False)"
FRAMES_IN = 3000  # log-mel frames of one 30 s window
_EXAMPLE = {"batch": 2, "rows": 4, "new": 3, "chunks": 2}
# int8 copies: the linear layers' weights, and in the step also the token table, which the
# vocabulary projection shares (quantized once: 28.6 MB instead of 109 for tiny.en's step
# graph). The encoder's convolutions stay float32: onnxruntime's CPU ConvInteger takes
# uint8 weights only.
_INT8_OPS = {"encoder": ["MatMul"], "decoder_step": ["MatMul", "Gather"]}


def encoder_names(layers: int) -> tuple[list[str], list[str]]:
    outputs = [f"cross_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]
    return ["features"], outputs


def decoder_names(layers: int) -> tuple[list[str], list[str]]:
    past = [f"past_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]
    cross = [f"cross_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]
    new = [f"{kv}_{i}" for i in range(layers) for kv in ("key", "value")]
    return ["tokens", "positions", *past, *cross], ["logits", *new, "alignment_scores"]


def export_encoder(network, path: Path) -> None:
    config = network.config
    inputs, outputs = encoder_names(config.decoder_layers)
    features = torch.zeros(_EXAMPLE["batch"], config.num_mel_bins, FRAMES_IN)
    axes = {name: {0: "batch"} for name in (*inputs, *outputs)}
    _export(EncoderGraph(network), (features,), path, inputs, outputs, axes)


def export_decoder_step(network, path: Path) -> None:
    config = network.config
    layers, heads = config.decoder_layers, config.decoder_attention_heads
    head_dim = config.d_model // heads
    rows, new, chunks = _EXAMPLE["rows"], _EXAMPLE["new"], _EXAMPLE["chunks"]
    tokens = torch.randint(0, config.vocab_size, (rows, new))
    positions = torch.arange(new).repeat(rows, 1) + 4
    past = [torch.randn(rows, heads, 2 + i // 2, head_dim) for i in range(2 * layers)]
    frames = config.max_source_positions
    cross = [torch.randn(chunks, heads, frames, head_dim) for _ in range(2 * layers)]
    inputs, outputs = decoder_names(layers)
    axes: dict[str, dict[int, str]] = {name: {0: "rows", 1: "new"} for name in inputs[:2]}
    axes["logits"] = {0: "rows", 1: "new"}
    axes["alignment_scores"] = {0: "rows", 2: "new"}
    for i in range(layers):
        for kv in ("key", "value"):
            axes[f"past_{kv}_{i}"] = {0: "rows", 2: f"kept_{i}"}
            axes[f"cross_{kv}_{i}"] = {0: "chunks"}
            axes[f"{kv}_{i}"] = {0: "rows", 2: "new"}
    module = DecoderStep(network)
    _export(module, (tokens, positions, *past, *cross), path, inputs, outputs, axes)


def _export(module, example: tuple, path: Path, inputs, outputs, axes) -> None:
    with warnings.catch_warnings(), torch.no_grad():
        # The exporter's deprecation notice and tracer remarks are not the user's concern.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            example,
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            do_constant_folding=True,
        )


def quantize(role: str, source: Path, target: Path) -> None:
    """The int8 copy of graph `role` ("encoder" or "decoder_step"): weights int8, activations
    quantized per call (onnxruntime's dynamic quantization)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    root.addFilter(_no_preprocessing_advice)
    try:
        quantize_dynamic(
            source,
            target,
            op_types_to_quantize=_INT8_OPS[role],
            weight_type=QuantType.QInt8,
            use_external_data_format=source.stat().st_size > 2**31 - 2**26,
        )
    finally:
        root.removeFilter(_no_preprocessing_advice)


def _no_preprocessing_advice(record: logging.LogRecord) -> bool:
    """quantize_dynamic logs a warning on the root logger advising its pre-processing (shape
    inference and graph fusions) on every call; the int8 graphs here are made without it,
    and the tests hold their transcript to a WER bound."""
    return not record.getMessage().startswith("Please consider to run pre-processing")


def describe(path: Path) -> dict[str, list[dict]]:
    """Each input and output of the graph at `path`: its name, element type and shape (a
    named dynamic axis is its name), read from the file as written."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {tensor.name for tensor in graph.initializer}

    def entry(value) -> dict:
        kind = value.type.tensor_type
        shape = [dim.dim_param or dim.dim_value for dim in kind.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(kind.elem_type).name
        return {"name": value.name, "dtype": dtype, "shape": shape}

    return {
        "inputs": [entry(v) for v in graph.input if v.name not in initializers],
        "outputs": [entry(v) for v in graph.output],
    }
