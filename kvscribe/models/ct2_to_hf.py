"""Convert a CTranslate2 Whisper model into a transformers model directory, offline.

Writes model.safetensors (the stored fp16 values, unchanged), config.json,
generation_config.json (rebuilt: without it transformers' generate() emits
garbage), tokenizer files and preprocessor_config.json. Needs numpy and
safetensors only; transformers itself is not imported.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from kvscribe.models.ct2_file import Variable, WhisperDims, read_variables, whisper_dims
from kvscribe.models.vocab import SpecialTokens, special_tokens
from kvscribe.staging import staging_dir

CONVERTER_VERSION = 1
_NUMPY = {
    "float32": np.float32,
    "float16": np.float16,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
}


def convert(ct2_dir: Path, target: Path) -> Path:
    """Write the transformers model for `ct2_dir` into `target` (atomically)."""
    dims = whisper_dims(ct2_dir / "model.bin")
    tokens = special_tokens(ct2_dir / "tokenizer.json")
    ct2_config = json.loads((ct2_dir / "config.json").read_text(encoding="utf-8"))
    staging = staging_dir(target)
    try:
        _write_weights(ct2_dir / "model.bin", dims, staging / "model.safetensors")
        _write_json(staging / "config.json", _model_config(dims, tokens))
        _write_json(
            staging / "generation_config.json", _generation_config(dims, tokens, ct2_config)
        )
        _write_tokenizer(ct2_dir, staging, tokens)
        _write_json(staging / "preprocessor_config.json", _feature_config(dims))
        staging.rename(target)
    except OSError:
        if not (target / "model.safetensors").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _write_weights(model_bin: Path, dims: WhisperDims, out: Path) -> None:
    from safetensors.numpy import save_file

    tensors = dict(iter_hf_tensors(model_bin.parent, dims))
    save_file(tensors, str(out), metadata={"format": "pt"})


def iter_hf_tensors(ct2_dir: Path, dims: WhisperDims):
    """(transformers name, array) for every weight of a CTranslate2 model, read one by one."""
    model_bin = ct2_dir / "model.bin"
    variables = read_variables(model_bin)
    with open(model_bin, "rb") as handle:
        yield from _hf_tensors(lambda name: _load(handle, variables[name]), dims)


def _load(handle, variable: Variable) -> np.ndarray:
    handle.seek(variable.offset)
    data = np.frombuffer(handle.read(variable.nbytes), dtype=_NUMPY[variable.dtype])
    return data.reshape(variable.shape).copy()


def _hf_tensors(load, dims: WhisperDims):
    """(transformers name, array) for every weight, from CTranslate2's names."""
    yield from _pairs(
        "model.encoder",
        "encoder",
        load,
        [
            ("conv1.weight", "conv1/weight"),
            ("conv1.bias", "conv1/bias"),
            ("conv2.weight", "conv2/weight"),
            ("conv2.bias", "conv2/bias"),
            ("embed_positions.weight", "position_encodings/encodings"),
            ("layer_norm.weight", "layer_norm/gamma"),
            ("layer_norm.bias", "layer_norm/beta"),
        ],
    )
    yield from _pairs(
        "model.decoder",
        "decoder",
        load,
        [
            ("embed_tokens.weight", "embeddings/weight"),
            ("embed_positions.weight", "position_encodings/encodings"),
            ("layer_norm.weight", "layer_norm/gamma"),
            ("layer_norm.bias", "layer_norm/beta"),
        ],
    )
    for i in range(dims.n_audio_layer):
        yield from _encoder_layer(f"model.encoder.layers.{i}", f"encoder/layer_{i}", load)
    for i in range(dims.n_text_layer):
        yield from _decoder_layer(f"model.decoder.layers.{i}", f"decoder/layer_{i}", load)


def _pairs(hf_prefix: str, ct2_prefix: str, load, names):
    for hf_name, ct2_name in names:
        yield f"{hf_prefix}.{hf_name}", load(f"{ct2_prefix}/{ct2_name}")


def _norm(hf: str, ct2: str, load):
    yield f"{hf}.weight", load(f"{ct2}/gamma")
    yield f"{hf}.bias", load(f"{ct2}/beta")


def _linear(hf: str, ct2: str, load):
    yield f"{hf}.weight", load(f"{ct2}/weight")
    yield f"{hf}.bias", load(f"{ct2}/bias")


def _split(hf_prefix: str, ct2: str, names: tuple[str, ...], load):
    """A stacked projection ([k*d, d]) into k separate ones; key projections have no bias."""
    weights = np.split(load(f"{ct2}/weight"), len(names))
    biases = np.split(load(f"{ct2}/bias"), len(names))
    for name, weight, bias in zip(names, weights, biases, strict=True):
        yield f"{hf_prefix}.{name}.weight", weight
        if name != "k_proj":
            yield f"{hf_prefix}.{name}.bias", bias


def _encoder_layer(hf: str, ct2: str, load):
    yield from _split(
        f"{hf}.self_attn", f"{ct2}/self_attention/linear_0", ("q_proj", "k_proj", "v_proj"), load
    )
    yield from _linear(f"{hf}.self_attn.out_proj", f"{ct2}/self_attention/linear_1", load)
    yield from _norm(f"{hf}.self_attn_layer_norm", f"{ct2}/self_attention/layer_norm", load)
    yield from _linear(f"{hf}.fc1", f"{ct2}/ffn/linear_0", load)
    yield from _linear(f"{hf}.fc2", f"{ct2}/ffn/linear_1", load)
    yield from _norm(f"{hf}.final_layer_norm", f"{ct2}/ffn/layer_norm", load)


def _decoder_layer(hf: str, ct2: str, load):
    yield from _encoder_layer(hf, ct2, load)  # self-attention, ffn and their norms
    yield from _linear(f"{hf}.encoder_attn.q_proj", f"{ct2}/attention/linear_0", load)
    yield from _split(f"{hf}.encoder_attn", f"{ct2}/attention/linear_1", ("k_proj", "v_proj"), load)
    yield from _linear(f"{hf}.encoder_attn.out_proj", f"{ct2}/attention/linear_2", load)
    yield from _norm(f"{hf}.encoder_attn_layer_norm", f"{ct2}/attention/layer_norm", load)


def _model_config(dims: WhisperDims, tokens: SpecialTokens) -> dict:
    return {
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "vocab_size": dims.n_vocab,
        "num_mel_bins": dims.n_mels,
        "d_model": dims.n_text_state,
        "encoder_layers": dims.n_audio_layer,
        "encoder_attention_heads": dims.n_audio_head,
        "encoder_ffn_dim": 4 * dims.n_audio_state,
        "decoder_layers": dims.n_text_layer,
        "decoder_attention_heads": dims.n_text_head,
        "decoder_ffn_dim": 4 * dims.n_text_state,
        "max_source_positions": dims.n_audio_ctx,
        "max_target_positions": dims.n_text_ctx,
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "bos_token_id": tokens.eot,
        "eos_token_id": tokens.eot,
        "pad_token_id": tokens.eot,
        "decoder_start_token_id": tokens.sot,
        "begin_suppress_tokens": [220, tokens.eot],
        "torch_dtype": "float16",
    }


def _generation_config(dims: WhisperDims, tokens: SpecialTokens, ct2_config: dict) -> dict:
    multilingual = tokens.is_multilingual
    return {
        "decoder_start_token_id": tokens.sot,
        "bos_token_id": tokens.eot,
        "eos_token_id": tokens.eot,
        "pad_token_id": tokens.eot,
        "max_length": dims.n_text_ctx,
        "is_multilingual": multilingual,
        "lang_to_id": {f"<|{code}|>": i for code, i in tokens.languages.items()}
        if multilingual
        else {},
        "task_to_id": {"transcribe": tokens.transcribe, "translate": tokens.translate}
        if multilingual
        else {},
        "forced_decoder_ids": None,
        "no_timestamps_token_id": tokens.no_timestamps,
        "prev_sot_token_id": tokens.sot_prev,
        "max_initial_timestamp_index": 50,
        "suppress_tokens": list(ct2_config.get("suppress_ids", [])),
        "begin_suppress_tokens": list(ct2_config.get("suppress_ids_begin", [220, tokens.eot])),
        "alignment_heads": [list(pair) for pair in ct2_config.get("alignment_heads", [])],
        "return_timestamps": False,
    }


def _write_tokenizer(ct2_dir: Path, out: Path, tokens: SpecialTokens) -> None:
    shutil.copy2(ct2_dir / "tokenizer.json", out / "tokenizer.json")
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "WhisperTokenizer",
            "model_max_length": 1024,
            "bos_token": "<|endoftext|>",
            "eos_token": "<|endoftext|>",
            "unk_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "add_prefix_space": False,
            "errors": "replace",
        },
    )


def _feature_config(dims: WhisperDims) -> dict:
    return {
        "feature_extractor_type": "WhisperFeatureExtractor",
        "processor_class": "WhisperProcessor",
        "feature_size": dims.n_mels,
        "sampling_rate": 16000,
        "hop_length": 160,
        "chunk_length": 30,
        "n_fft": 400,
        "n_samples": 480000,
        "nb_max_frames": 3000,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": False,
    }
