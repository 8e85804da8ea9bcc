"""Whisper as plain torch modules, loaded from a transformers checkpoint without importing
transformers.

Importing transformers' Whisper costs a process about 1.5 s on a laptop CPU (it pulls
torch.distributed, sympy and dynamo through its activations module), ten times the
weights' own load. The network here has transformers' module and parameter names
(`model.encoder.layers.0.self_attn.q_proj`, ...), so the checkpoint's safetensors load by
name, and its encoder repeats transformers' operations in transformers' order, so the
values are the same (tests/test_hf_network.py compares both, and PolicyDecoder's logits on
each). The decoder has no forward of its own: backends/transformers/decoder.py runs its modules with
kvscribe's per-layer cache.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

WEIGHTS = "model.safetensors"


@dataclasses.dataclass(frozen=True)
class WhisperConfig:
    """The sizes config.json gives (transformers' key names)."""

    num_mel_bins: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_layers: int
    decoder_attention_heads: int
    decoder_ffn_dim: int
    max_source_positions: int
    max_target_positions: int
    vocab_size: int

    @classmethod
    def read(cls, model_dir: Path) -> WhisperConfig:
        given = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in given]
        if missing:
            raise ValueError(f"config.json has no {', '.join(missing)}")
        return cls(**{f.name: int(given[f.name]) for f in dataclasses.fields(cls)})


class Attention(nn.Module):
    """Multi-head attention's projections (k_proj has no bias, as in Whisper)."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.num_heads = heads
        self.head_dim = d_model // heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        return x.view(batch, tokens, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Unmasked self-attention over `x` [batch, tokens, d_model] (the encoder's)."""
        query = self._heads(self.q_proj(x) * self.scaling)  # scaled first, as transformers
        keys, values = self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        out = F.scaled_dot_product_attention(query, keys, values, scale=1.0)
        return self.out_proj(out.transpose(1, 2).reshape(x.shape).contiguous())


class _FeedForward(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.final_layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, hidden)
        self.fc2 = nn.Linear(hidden, d_model)
        self.activation_fn = nn.GELU()

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_fn(self.fc1(self.final_layer_norm(x))))


class EncoderLayer(_FeedForward):
    def __init__(self, config: WhisperConfig) -> None:
        super().__init__(config.d_model, config.encoder_ffn_dim)
        self.self_attn = Attention(config.d_model, config.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        x = x + self.feed_forward(x)
        if x.dtype == torch.float16:  # transformers clamps fp16 activations here
            bound = torch.finfo(x.dtype).max - 1000
            x = torch.clamp(x, min=-bound, max=bound)
        return x


class DecoderLayer(_FeedForward):
    """Weights only: backends/transformers/decoder.py runs them."""

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__(config.d_model, config.decoder_ffn_dim)
        self.self_attn = Attention(config.d_model, config.decoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.encoder_attn = Attention(config.d_model, config.decoder_attention_heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)


class Encoder(nn.Module):
    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        d_model = config.d_model
        self.conv1 = nn.Conv1d(config.num_mel_bins, d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel_size=3, stride=2, padding=1)
        self.embed_positions = _embedding(config.max_source_positions, d_model)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Log-mel [batch, n_mels, 3000] -> encoder output [batch, 1500, d_model]."""
        x = F.gelu(self.conv1(features))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        x = x + self.embed_positions.weight
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class Decoder(nn.Module):
    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.embed_tokens = _embedding(config.vocab_size, config.d_model)
        self.embed_positions = _embedding(config.max_target_positions, config.d_model)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.layer_norm = nn.LayerNorm(config.d_model)


class _Model(nn.Module):
    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)


class WhisperNetwork(nn.Module):
    """`model.encoder`, `model.decoder` and `proj_out` (tied to the token embedding)."""

    def __init__(self, config: WhisperConfig, alignment_heads: tuple = ()) -> None:
        super().__init__()
        self.config = config
        self.alignment_heads = alignment_heads
        self.model = _Model(config)
        self.proj_out = nn.Linear(config.d_model, config.vocab_size, bias=False)


def load(model_dir: Path, dtype: torch.dtype, device: str) -> WhisperNetwork:
    """The checkpoint in `model_dir` (config.json, model.safetensors), in `dtype` on `device`.

    The modules are built on the meta device and take the file's tensors as they are, so
    nothing is initialised at random first; a weight missing from the file, or one the
    network has no place for, is an error naming it."""
    from safetensors.torch import load_file

    config = WhisperConfig.read(model_dir)
    with torch.device("meta"):
        network = WhisperNetwork(config, _alignment_heads(model_dir))
    weights = load_file(str(model_dir / WEIGHTS), device="cpu")
    weights.pop("proj_out.weight", None)  # Whisper's is the token embedding: tied below
    expected = set(network.state_dict()) - {"proj_out.weight"}
    missing, extra = expected - set(weights), set(weights) - expected
    if missing or extra:
        named = ", ".join(sorted(missing)[:3] or sorted(extra)[:3])
        raise ValueError(f"{WEIGHTS} does not fit a Whisper of its config.json: {named}")
    network.load_state_dict(weights, assign=True, strict=False)
    network.proj_out.weight = network.model.decoder.embed_tokens.weight
    return network.to(device=device, dtype=dtype).eval().requires_grad_(False)


def _embedding(rows: int, width: int) -> nn.Embedding:
    """An embedding over an uninitialised weight: on the meta device, nn.Embedding's own
    random initialisation goes through torch's reference ops, 1.6 s to import."""
    return nn.Embedding(rows, width, _weight=torch.empty(rows, width))


def _alignment_heads(model_dir: Path) -> tuple[tuple[int, int], ...]:
    path = model_dir / "generation_config.json"
    given = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return tuple((int(layer), int(head)) for layer, head in given.get("alignment_heads") or ())
