"""The exported graphs (backends/onnx/graphs.py) run by onnxruntime, with kvscribe's own
cache between decoder steps: onnxruntime and numpy only, no torch.

The self-attention K/V live in a kvcache.PolicyCache of numpy arrays, so every policy the
torch engine has applies here through the same code (kvscribe/arrays.py): a
step feeds each layer's kept K/V (Q8_0/Q4_0 blocks read back to float32) and the new
tokens' positions, which count every token the cache has seen, however many it kept,
and stores the K/V the step returns under the layer's policy (`logits` is the step as
kvscribe.stepped.search drives a decoder). The cross-attention K/V
come from the encoder graph into a kvcache.CrossAttentionStore (one copy per beam, or
one per chunk that the step's folded beams share; optionally Q8_0/Q4_0).

Half layers (keep each token's layer input, recompute K/V from it every step) need the
layer's K/V projections outside the graph, and the step graph takes K/V: they are not
applicable here, and run as full layers (`applicable_specs` says so).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kvscribe.backends.onnx.export import OnnxExport
from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.kvcache.spec import LayerSpec

HALF_NOT_APPLICABLE = (
    "half layers: the ONNX step graph takes K/V, not layer inputs to recompute them from "
    "(those layers keep K/V)"
)


@dataclass(frozen=True)
class StepOutput:
    logits: np.ndarray  # [rows, new, vocab]
    alignment_scores: np.ndarray  # [rows, alignment heads, new, frames], before softmax


class EncodedChunks:
    """The encoder graph's output for some chunks, as the stepped core handles an encoder
    output (kvscribe/stepped/batched.py): `len()` counts the chunks, a slice selects some
    (a view), a list of chunks selects some (a copy), and iterating gives, per decoder
    layer, the chunks' (K, V) [chunks, heads, frames, head_dim]: what
    CrossAttentionStore.fill_projected takes (and may share: nothing writes them)."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.layers = layers

    def __len__(self) -> int:
        return self.layers[0][0].shape[0]

    def __getitem__(self, which: slice | list[int]) -> EncodedChunks:
        if isinstance(which, slice):
            return EncodedChunks([(k[which], v[which]) for k, v in self.layers])
        rows = np.asarray(which, dtype=np.int64)
        return EncodedChunks([(np.take(k, rows, 0), np.take(v, rows, 0)) for k, v in self.layers])

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return iter(self.layers)


class OnnxEngine:
    """One export's encoder and decoder-step sessions."""

    def __init__(
        self,
        export: OnnxExport,
        compute_type: str = "float32",
        providers: tuple[str, ...] = ("CPUExecutionProvider",),
        threads: int | None = None,
    ) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads

        def session(role: str):
            path = str(export.graph(role, compute_type))
            return ort.InferenceSession(path, options, providers=list(providers))

        self.encoder, self.decoder = session("encoder"), session("decoder_step")
        self._step_inputs = [i.name for i in self.decoder.get_inputs()]
        self.layers = sum(name.startswith("past_key_") for name in self._step_inputs)
        past = self.decoder.get_inputs()[self._step_inputs.index("past_key_0")]
        self.heads, self.head_dim = past.shape[1], past.shape[3]
        self.frames = int(export.manifest["dims"]["frames"])  # encoder frames of a window

    def encode(self, features: np.ndarray) -> EncodedChunks:
        """Log-mel windows [chunks, n_mels, 3000] -> every decoder layer's cross-attention
        (K, V) of each, encoded a window at a time: the activations of one window (tiny:
        ~60 MB), however many chunks a batch holds."""
        features = np.ascontiguousarray(features, np.float32)
        arrays: list[np.ndarray] = []
        for index, window in enumerate(features):
            out = self.encoder.run(None, {"features": window[None]})
            if not arrays:  # every chunk's output in one array per K and V of each layer
                arrays = [np.empty((len(features), *o.shape[1:]), o.dtype) for o in out]
            for whole, part in zip(arrays, out, strict=True):
                whole[index] = part[0]
        return EncodedChunks(list(zip(arrays[0::2], arrays[1::2], strict=True)))

    def step(
        self, tokens: np.ndarray, cache: PolicyCache, cross: CrossAttentionStore
    ) -> StepOutput:
        """Run `tokens` [rows, new] against what `cache` kept and `cross`; the new tokens'
        K/V go into `cache`, under each layer's policy."""
        rows, new = tokens.shape
        seen = cache.get_seq_length()
        positions = np.broadcast_to(np.arange(seen, seen + new, dtype=np.int64), (rows, new))
        feeds = {"tokens": tokens.astype(np.int64), "positions": np.ascontiguousarray(positions)}
        empty = np.zeros((rows, self.heads, 0, self.head_dim), np.float32)
        for index, layer in enumerate(cache.policy_layers):
            keys, values = layer.past()
            feeds[f"past_key_{index}"] = empty if keys is None else keys
            feeds[f"past_value_{index}"] = empty if values is None else values
            feeds[f"cross_key_{index}"], feeds[f"cross_value_{index}"] = cross.get(index)
        out = self.decoder.run(None, feeds)
        for index, layer in enumerate(cache.policy_layers):
            layer.add(out[1 + 2 * index], out[2 + 2 * index])
        cache.note_peak()
        return StepOutput(out[0], out[-1])

    def logits(
        self,
        tokens: np.ndarray,
        cache: PolicyCache,
        cross: CrossAttentionStore,
        positions: tuple[int, ...] = (-1,),
    ) -> np.ndarray:
        """kvscribe.stepped.search's decoder interface: the step's logits at `positions`
        [rows, len(positions), vocab], so the same greedy and beam search drive this engine
        and the transformers backend's."""
        logits = self.step(tokens, cache, cross).logits
        if positions == (-1,):  # a decoding step: a view, not a copy of [rows, vocab]
            return logits[:, -1:]
        return logits[:, list(positions)]


def applicable_specs(specs: tuple[LayerSpec, ...]) -> tuple[tuple[LayerSpec, ...], list[str]]:
    """The per-layer specs this engine runs (half layers as full ones), and the notes that
    say what could not apply and why."""
    if not any(spec.half for spec in specs):
        return specs, []
    kept = tuple(dataclasses.replace(spec, half=False) for spec in specs)
    return kept, [HALF_NOT_APPLICABLE]
