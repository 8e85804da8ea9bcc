"""The parts of faster-whisper that kvscribe uses beyond its documented API, all reached here.

faster-whisper documents `WhisperModel(...)` with `transcribe()` and `detect_language()`,
`BatchedInferencePipeline` and `VadOptions`. kvscribe's batched and streamed ctranslate2
paths decode exactly as faster-whisper does, so they reuse more of it: its tokenizer,
prompt builder and suppressed tokens, its feature padding, cross-attention alignment and
punctuation rules, the speech-timestamp clock, the model-name table, the assets folder
and the feature extractor a `WhisperModel` reads. Each is a function here and nowhere
else: tests/test_adapters.py checks every one against the installed faster-whisper (so an
upgrade that changes one fails there, by name) and that no other module reaches past the
documented names. At run time a part that moved or was renamed is a one-line
BackendUnavailableError naming the release kvscribe was tested with.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kvscribe.errors import BackendUnavailableError

TESTED_RELEASE = "1.2.1"  # the faster-whisper every function here was checked against
DOCUMENTED = ("WhisperModel", "BatchedInferencePipeline", "VadOptions")


@contextlib.contextmanager
def _part(name: str) -> Iterator[None]:
    """Turn a missing part of faster-whisper into one line the user can act on."""
    try:
        yield
    except (ImportError, AttributeError, KeyError) as exc:
        raise BackendUnavailableError(
            f"this faster-whisper has no {name} ({type(exc).__name__}: {exc})",
            subject="faster-whisper",
            hint=f"pip install 'faster-whisper=={TESTED_RELEASE}' (the release kvscribe "
            "was tested with)",
        ) from None


def _attribute(module: str, name: str) -> Any:
    with _part(f"{module}.{name}"):
        return getattr(importlib.import_module(module), name)


# -- models and assets --------------------------------------------------------------------


def model_repositories() -> dict[str, str]:
    """Short model name -> hub repository, as `WhisperModel(name)` maps it (faster-whisper
    keeps the private table current as repositories move; it is the only copy)."""
    return dict(_attribute("faster_whisper.utils", "_MODELS"))


def assets_folder() -> Path:
    """The folder of the models faster-whisper ships (silero VAD), found without importing
    faster-whisper, whose package loads CTranslate2 and PyAV (a VAD needs neither); its
    `utils.get_assets_path` names the same folder. ImportError: not installed."""
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("faster_whisper is not installed", name="faster_whisper")
    return Path(next(iter(spec.submodule_search_locations))) / "assets"


# -- decoding as transcribe() does it -------------------------------------------------------


def tokenizer(engine, task: str, language: str):
    """faster-whisper's Tokenizer for `engine` (a WhisperModel)."""
    make = _attribute("faster_whisper.tokenizer", "Tokenizer")
    with _part("WhisperModel.hf_tokenizer"):
        return make(engine.hf_tokenizer, engine.model.is_multilingual, task, language)


def prompt(engine, tokens, previous: list[int], hotwords: str | None = None) -> list[int]:
    """The decoder prompt transcribe() builds, without timestamp tokens (hotwords go
    before the previous text)."""
    with _part("WhisperModel.get_prompt"):
        return engine.get_prompt(
            tokens, previous_tokens=previous, without_timestamps=True, hotwords=hotwords
        )


def suppressed_tokens(tokens, requested: tuple[int, ...] = (-1,)) -> list[int]:
    """transcribe()'s `suppress_tokens` (-1: the model's own list) resolved for `tokens`."""
    resolve = _attribute("faster_whisper.transcribe", "get_suppressed_tokens")
    return list(resolve(tokens, list(requested)))


def max_length(engine) -> int:
    with _part("WhisperModel.max_length"):
        return engine.max_length


def window_features(engine, samples: np.ndarray) -> np.ndarray:
    """The log-mel of up to 30 s of samples, padded in the feature domain to one window,
    as the batched pipeline pads its chunks."""
    pad_or_trim = _attribute("faster_whisper.audio", "pad_or_trim")
    return pad_or_trim(feature_extractor(engine)(samples)[..., :-1])


def encode(engine, features: np.ndarray):
    with _part("WhisperModel.encode"):
        return engine.encode(features)


def feature_extractor(engine):
    """The FeatureExtractor `engine` computes its log-mel with."""
    with _part("WhisperModel.feature_extractor"):
        return engine.feature_extractor


def with_model(engine, model):
    """A shallow copy of `engine` whose calls run on `model` (a ctranslate2 Whisper of the
    same weights, loaded with other threads); `engine` keeps its own."""
    with _part("WhisperModel.model"):
        engine.model  # noqa: B018  # the part replaced exists
    view = copy.copy(engine)
    view.model = model
    return view


def install_model(engine, model) -> None:
    """Make `engine`'s calls run on `model` from now on: in place, for every copy that
    shares `engine` itself (with_model copies it instead)."""
    with _part("WhisperModel.model"):
        engine.model  # noqa: B018  # the part replaced exists
    engine.model = model


def with_feature_extractor(engine, extractor):
    """A shallow copy of `engine` whose transcribe() reads features from `extractor`; the
    engine itself (shared by every run of the backend) keeps its own."""
    feature_extractor(engine)  # the part replaced exists
    view = copy.copy(engine)
    view.feature_extractor = extractor
    return view


def with_encoder_frames(engine, frames: int):
    """A shallow copy of `engine` whose encoder reads only the first `frames` log-mel
    frames of each window: transcribe() pads every window to 30 s before `encode`, and
    CTranslate2's Whisper encoder takes a shorter one."""
    with _part("WhisperModel.encode"):
        encode = type(engine).encode
    view = copy.copy(engine)
    view.encode = lambda features: encode(view, np.ascontiguousarray(features[..., :frames]))
    return view


# -- words ----------------------------------------------------------------------------------


def align(engine, tokens, token_rows, encoded, frames: list[int], median_filter: int):
    """Cross-attention word alignment of each row, as `word_timestamps=True` runs it."""
    with _part("WhisperModel.find_alignment"):
        return engine.find_alignment(tokens, token_rows, encoded, frames, median_filter)


def merge_punctuations(alignment: list[dict]) -> None:
    """Glue punctuation to the word beside it, in place, with transcribe()'s defaults."""
    prepend, append = punctuation_defaults()
    _attribute("faster_whisper.transcribe", "merge_punctuations")(alignment, prepend, append)


def punctuation_defaults() -> tuple[str, str]:
    """transcribe()'s `prepend_punctuations` and `append_punctuations` defaults."""
    import inspect

    transcribe = _attribute("faster_whisper", "WhisperModel").transcribe
    with _part("the punctuation parameters of WhisperModel.transcribe"):
        parameters = inspect.signature(transcribe).parameters
        return parameters["prepend_punctuations"].default, parameters["append_punctuations"].default


# -- voice activity ---------------------------------------------------------------------------


def speech_clock(chunks: list[dict], sample_rate: int):
    """The map from VAD-kept audio back to the input's clock that transcribe() uses."""
    return _attribute("faster_whisper.vad", "SpeechTimestampsMap")(chunks, sample_rate)
