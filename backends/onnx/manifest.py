"""manifest.json of an ONNX export: what a reader of the graphs needs without opening them
(each file, its size and sha256, its inputs and outputs as written, the opset, the model's
dimensions and alignment heads), and the versions that made it, so one export can be told
from another."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from kvscribe.digest import sha256_file

# Distributions whose versions shape an export.
VERSIONED = ("kvscribe", "torch", "safetensors", "onnx", "onnxruntime")
# What the graphs' named axes mean (backends/onnx/graphs.py says why), for their readers.
AXES = {
    "batch": "30 s windows encoded at once",
    "chunks": "cross-attention K/V copies: one per chunk (or one per beam: chunks == rows)",
    "rows": "decoded sequences, chunks * beams, chunk-major (chunk 0's beams first)",
    "new": "tokens fed this step (the prompt, then 1)",
    "kept_<layer>": "self-attention entries the cache policy kept in that layer (0 allowed)",
    "positions": "each new token's absolute position: every token seen, kept or not",
    "alignment_scores": "cross-attention scores before softmax, heads in alignment_heads order",
}


def graph_entry(folder: Path, name: str) -> dict:
    """The manifest's entry for graph file `name` in `folder`, once onnxruntime has loaded
    it (a graph onnxruntime's CPU provider cannot run is an error here, not at first use)."""
    import onnxruntime

    from kvscribe.backends.onnx import trace

    path = folder / name
    onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    entry = {"file": name, "bytes": path.stat().st_size, "sha256": sha256_file(path)}
    return entry | trace.describe(path)


def describe(model: dict, network, graphs: dict) -> dict:
    """The manifest of `model` ({"name", "origin", "digest"}) exported from `network`."""
    from kvscribe.backends.onnx import trace

    config = network.config
    heads = config.decoder_attention_heads
    return {
        "model": model,
        "exporter": trace.EXPORTER,
        "opset": trace.OPSET,
        "versions": {name: _version(name) for name in VERSIONED},
        "dims": {
            "decoder_layers": config.decoder_layers,
            "heads": heads,
            "head_dim": config.d_model // heads,
            "d_model": config.d_model,
            "vocab_size": config.vocab_size,
            "n_mels": config.num_mel_bins,
            "mel_frames": trace.FRAMES_IN,
            "frames": config.max_source_positions,
            "max_positions": config.max_target_positions,
        },
        "alignment_heads": [list(pair) for pair in network.alignment_heads],
        "axes": AXES,
        "graphs": graphs,
    }


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
