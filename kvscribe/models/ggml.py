"""Write a whisper.cpp model file (ggml, f16 weights) from CTranslate2 or transformers weights.

Layout (whisper.cpp's loader): u32 magic, 11 i32 hyper-parameters, the mel
filters (i32 n_mel, i32 n_freq, f32 data), the ordinary vocabulary (i32 count,
then u32 length + raw bytes per token), then tensors until end of file: i32
n_dims, i32 name length, i32 type, the dims fastest-first, the name, the data.
Tensor names are openai-whisper's. Matrices are f16; biases, norms, positional
embeddings and the conv biases (stored [n, 1]) stay f32, as whisper.cpp expects.
Only numpy (and safetensors for a transformers source) is needed.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from kvscribe.audio.mel import mel_filters
from kvscribe.errors import ModelNotFoundError
from kvscribe.models.ct2_file import WhisperDims, whisper_dims
from kvscribe.models.formats import GGML_MAGIC
from kvscribe.models.vocab import special_tokens
from kvscribe.staging import staging_file

WRITER_VERSION = 1
_F32, _F16 = 0, 1  # ggml tensor types
_FTYPE_F16 = 1  # the file's weight type: "mostly f16"
# ggml type -> (bytes per block, values per block): f32, f16 and the quantised types
# whisper.cpp's quantize tool writes (q4_0, q4_1, q5_0, q5_1, q8_0).
_BLOCK_BYTES = {
    0: (4, 1),
    1: (2, 1),
    2: (18, 32),
    3: (20, 32),
    6: (22, 32),
    7: (24, 32),
    8: (34, 32),
}
_KEEP_F32 = {
    "encoder.conv1.bias",
    "encoder.conv2.bias",
    "encoder.positional_embedding",
    "decoder.positional_embedding",
}

# transformers name -> openai-whisper name (applied in order; each pattern anchors a prefix).
_RENAMES = [
    (r"^model\.encoder\.embed_positions\.weight$", "encoder.positional_embedding"),
    (r"^model\.decoder\.embed_positions\.weight$", "decoder.positional_embedding"),
    (r"^model\.decoder\.embed_tokens\.weight$", "decoder.token_embedding.weight"),
    (r"^model\.encoder\.layer_norm\.", "encoder.ln_post."),
    (r"^model\.decoder\.layer_norm\.", "decoder.ln."),
    (r"^model\.(encoder|decoder)\.layers\.", r"\1.blocks."),
    (r"^model\.encoder\.conv", "encoder.conv"),
    (r"\.self_attn_layer_norm\.", ".attn_ln."),
    (r"\.encoder_attn_layer_norm\.", ".cross_attn_ln."),
    (r"\.final_layer_norm\.", ".mlp_ln."),
    (r"\.self_attn\.", ".attn."),
    (r"\.encoder_attn\.", ".cross_attn."),
    (r"\.q_proj\.", ".query."),
    (r"\.k_proj\.", ".key."),
    (r"\.v_proj\.", ".value."),
    (r"\.out_proj\.", ".out."),
    (r"\.fc1\.", ".mlp.0."),
    (r"\.fc2\.", ".mlp.2."),
]
_SKIP = {"proj_out.weight"}  # tied to the token embedding


def openai_name(hf_name: str) -> str:
    """transformers' weight name in openai-whisper's spelling, e.g.
    `model.decoder.layers.0.encoder_attn.k_proj.weight` -> `decoder.blocks.0.cross_attn.key.weight`.
    """
    name = hf_name
    for pattern, replacement in _RENAMES:
        name = re.sub(pattern, replacement, name)
    return name


def from_ctranslate2(ct2_dir: Path, target: Path) -> Path:
    """Write `target` (a .bin file) from a CTranslate2 model directory."""
    from kvscribe.models.ct2_to_hf import iter_hf_tensors

    dims = whisper_dims(ct2_dir / "model.bin")
    return _write(target, dims, ct2_dir / "tokenizer.json", iter_hf_tensors(ct2_dir, dims))


def from_transformers(hf_dir: Path, target: Path) -> Path:
    """Write `target` from a transformers Whisper directory (safetensors weights)."""
    weights = sorted(hf_dir.glob("*.safetensors"))
    if not weights or not (hf_dir / "tokenizer.json").is_file():
        raise ModelNotFoundError(
            "needs *.safetensors weights and tokenizer.json to convert to ggml",
            subject=str(hf_dir),
            hint="pass a model directory saved with safetensors, or a ggml file",
        )
    dims = _dims_from_config(json.loads((hf_dir / "config.json").read_text(encoding="utf-8")))
    return _write(target, dims, hf_dir / "tokenizer.json", _safetensors(weights))


def _safetensors(files: list[Path]) -> Iterator[tuple[str, np.ndarray]]:
    from safetensors import safe_open

    for path in files:
        with safe_open(str(path), framework="numpy") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not a dict)
                yield name, handle.get_tensor(name)


def _dims_from_config(config: dict) -> WhisperDims:
    return WhisperDims(
        n_mels=config["num_mel_bins"],
        n_audio_ctx=config["max_source_positions"],
        n_audio_state=config["d_model"],
        n_audio_head=config["encoder_attention_heads"],
        n_audio_layer=config["encoder_layers"],
        n_vocab=config["vocab_size"],
        n_text_ctx=config["max_target_positions"],
        n_text_state=config["d_model"],
        n_text_head=config["decoder_attention_heads"],
        n_text_layer=config["decoder_layers"],
    )


def _write(
    target: Path, dims: WhisperDims, tokenizer_json: Path, tensors: Iterable[tuple[str, np.ndarray]]
) -> Path:
    """Stream everything into a temporary file beside `target`, then rename it into place."""
    staging = staging_file(target)
    try:
        with open(staging, "wb") as out:
            out.write(GGML_MAGIC)
            out.write(struct.pack("<11i", *_hparams(dims)))
            filters = mel_filters(dims.n_mels)
            out.write(struct.pack("<2i", *filters.shape))
            out.write(filters.astype("<f4").tobytes())
            _write_vocab(out, tokenizer_json)
            for hf_name, array in tensors:
                if hf_name not in _SKIP:
                    _write_tensor(out, openai_name(hf_name), array)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staging, target)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return target


def _hparams(dims: WhisperDims) -> tuple[int, ...]:
    return (
        dims.n_vocab,
        dims.n_audio_ctx,
        dims.n_audio_state,
        dims.n_audio_head,
        dims.n_audio_layer,
        dims.n_text_ctx,
        dims.n_text_state,
        dims.n_text_head,
        dims.n_text_layer,
        dims.n_mels,
        _FTYPE_F16,
    )


def _write_vocab(out, tokenizer_json: Path) -> None:
    """Ordinary tokens (ids below end-of-text) as raw bytes; whisper.cpp adds the specials."""
    vocab = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["vocab"]
    count = special_tokens(tokenizer_json).eot
    by_id = [b""] * count
    decode = _byte_decoder()
    for token, token_id in vocab.items():
        if token_id < count:
            by_id[token_id] = bytes(decode[ch] for ch in token)
    out.write(struct.pack("<i", count))
    for data in by_id:
        out.write(struct.pack("<I", len(data)))
        out.write(data)


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, inverted (the byte-level BPE alphabet)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    kept += range(ord("®"), ord("ÿ") + 1)
    chars = list(kept)
    extra = 0
    for byte in range(256):
        if byte not in kept:
            kept.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(kept, chars, strict=True)}


def _write_tensor(out, name: str, array: np.ndarray) -> None:
    if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
        array = array.reshape(-1, 1)
    keep_f32 = array.ndim < 2 or name in _KEEP_F32
    data = np.ascontiguousarray(array, dtype="<f4" if keep_f32 else "<f2")
    encoded = name.encode()
    out.write(struct.pack("<3i", data.ndim, len(encoded), _F32 if keep_f32 else _F16))
    out.write(struct.pack(f"<{data.ndim}i", *reversed(data.shape)))
    out.write(encoded)
    out.write(data.tobytes())


def read_dims(path: Path) -> tuple[WhisperDims, int]:
    """The hyper-parameters in a (verified) ggml file's header, and its file type
    (0: f32, 1: mostly f16, others: quantized)."""
    with open(path, "rb") as handle:
        handle.seek(len(GGML_MAGIC))
        values = struct.unpack("<11i", _exactly(handle, 44))
    names = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer")
    names += ("n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels")
    return WhisperDims(**dict(zip(names, values[:10], strict=True))), values[10]


def verify(path: Path) -> int:
    """Walk a ggml file's structure without reading weights; returns n_vocab.

    whisper.cpp aborts or misbehaves on some incomplete files instead of failing
    cleanly, so a file given by path is checked here first.
    """
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            if handle.read(4) != GGML_MAGIC:
                raise ValueError("not a ggml file")
            hparams = struct.unpack("<11i", _exactly(handle, 44))
            n_mel, n_freq = struct.unpack("<2i", _exactly(handle, 8))
            handle.seek(4 * n_mel * n_freq, os.SEEK_CUR)
            (count,) = struct.unpack("<i", _exactly(handle, 4))
            for _ in range(count):
                (length,) = struct.unpack("<I", _exactly(handle, 4))
                handle.seek(length, os.SEEK_CUR)
            tensors = _count_tensors(handle, size)
    except (ValueError, struct.error) as exc:
        raise ModelNotFoundError(
            f"is not a complete whisper.cpp model ({exc})",
            subject=str(path),
            hint="re-download or reconvert it, or pass a model name such as tiny.en",
        ) from None
    encoder_layers, decoder_layers = hparams[4], hparams[8]
    expected = 7 + 15 * encoder_layers + 4 + 24 * decoder_layers
    if tensors != expected:
        raise ModelNotFoundError(
            f"is not a complete whisper.cpp model ({tensors} of {expected} tensors)",
            subject=str(path),
            hint="re-download or reconvert it, or pass a model name such as tiny.en",
        )
    return hparams[0]


def _count_tensors(handle, size: int) -> int:
    tensors = 0
    while handle.tell() < size:
        n_dims, name_len, kind = struct.unpack("<3i", _exactly(handle, 12))
        if not 0 < n_dims <= 4 or kind not in _BLOCK_BYTES:
            raise ValueError(f"unsupported tensor header at byte {handle.tell() - 12}")
        dims = struct.unpack(f"<{n_dims}i", _exactly(handle, 4 * n_dims))
        block_bytes, block_size = _BLOCK_BYTES[kind]
        handle.seek(name_len + int(np.prod(dims)) // block_size * block_bytes, os.SEEK_CUR)
        if handle.tell() > size:
            raise ValueError("the file ends inside a tensor")
        tensors += 1
    return tensors


def _exactly(handle, count: int) -> bytes:
    data = handle.read(count)
    if len(data) != count:
        raise ValueError("the file ends early")
    return data
