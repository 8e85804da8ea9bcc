"""A transcription or translation request as OpenAI's clients send it (multipart form),
checked field by field, and its upload spooled to the server's private folder."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvscribe.audio import (
    SAMPLE_RATE,
    check_complete,
    check_readable,
    non_finite_error,
    open_stream,
)
from kvscribe.errors import KvscribeError, UsageError
from kvscribe.languages import language_code
from kvscribe.serve.api_errors import ApiError, from_kvscribe

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
GRANULARITIES = ("word", "segment")
# What a client written for OpenAI sends as `model`; it names the server's model.
OPENAI_MODEL = "whisper-1"
# Form fields beyond the file: OpenAI's (a few dozen at most) and kvscribe's.
MAX_FIELDS = 32


@dataclass(frozen=True)
class TranscriptionAsk:
    """What one request asks, checked."""

    task: str  # transcribe | translate
    language: str | None
    prompt: str | None
    response_format: str
    temperature: float
    words: bool  # timestamp_granularities[] has "word"
    stream: bool
    with_stats: bool  # kvscribe_stats=true: the run's figures in the response


def read_ask(form: Any, task: str, model_names: tuple[str, ...]) -> TranscriptionAsk:
    """The request's fields, each checked; an ApiError (400 or 404) names the first bad one."""
    check_model(_one(form, "model", required=True), model_names)
    response_format = _one(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise ApiError(
            400,
            f"response_format must be one of {', '.join(RESPONSE_FORMATS)}; got "
            f"{response_format!r}",
            "response_format",
            "invalid_value",
        )
    # OpenAI's clients send the list as `timestamp_granularities[]`; curl users often
    # leave the brackets off.
    granularities = tuple(
        form.getlist("timestamp_granularities[]") + form.getlist("timestamp_granularities")
    )
    if any(g not in GRANULARITIES for g in granularities):
        raise ApiError(
            400,
            "timestamp_granularities[] takes word and segment",
            "timestamp_granularities",
            "invalid_value",
        )
    if granularities and response_format != "verbose_json":
        raise ApiError(
            400,
            "timestamp_granularities[] needs response_format verbose_json",
            "timestamp_granularities",
            "invalid_value",
        )
    stream = _flag(form, "stream")
    if stream and response_format not in ("json", "text"):
        raise ApiError(
            400,
            "stream=true gives text deltas: use response_format json or text",
            "stream",
            "invalid_value",
        )
    language = _language(_one(form, "language")) if task == "transcribe" else None
    return TranscriptionAsk(
        task=task,
        language=language,
        prompt=_one(form, "prompt") or None,
        response_format=response_format,
        temperature=_temperature(_one(form, "temperature")),
        words="word" in granularities,
        stream=stream,
        with_stats=_flag(form, "kvscribe_stats"),
    )


def _one(form: Any, name: str, required: bool = False) -> str | None:
    values = form.getlist(name)
    if len(values) > 1:
        raise ApiError(400, f"{name} was given {len(values)} times", name, "invalid_value")
    value = values[0] if values else None
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"{name} must be a text field, not a file", name, "invalid_value")
    if required and not value:
        raise ApiError(400, f"{name} is required", name, "missing_required_parameter")
    return value


def check_model(name: str | None, loaded: tuple[str, ...]) -> None:
    """404 unless `name` is the loaded model's, or OpenAI's name, which means it here."""
    if name not in (*loaded, OPENAI_MODEL):
        raise ApiError(
            404,
            f"model {name!r} is not loaded here: this server runs {', '.join(loaded)} "
            f"({OPENAI_MODEL} names it too)",
            "model",
            "model_not_found",
        )


def _flag(form: Any, name: str) -> bool:
    value = (_one(form, name) or "false").lower()
    if value not in ("true", "false"):
        raise ApiError(400, f"{name} must be true or false; got {value!r}", name, "invalid_value")
    return value == "true"


def _language(value: str | None) -> str | None:
    try:
        return language_code(value or None)
    except UsageError as exc:
        raise from_kvscribe(exc, "language") from None


def _temperature(value: str | None) -> float:
    try:
        number = float(value) if value else 0.0
    except ValueError:
        number = math.nan
    if not 0.0 <= number <= 1.0:
        raise ApiError(
            400,
            f"temperature must be between 0 and 1; got {value!r}",
            "temperature",
            "invalid_value",
        )
    return number


def spool(upload: Any, folder: Path) -> Path:
    """The uploaded file copied to `folder` (the server's private folder) under a random
    name; the caller removes it."""
    if upload is None or isinstance(upload, str):
        raise ApiError(
            400, "file is required: the audio, as a file part", "file", "missing_required_parameter"
        )
    handle, name = tempfile.mkstemp(dir=folder, prefix="upload-")
    with os.fdopen(handle, "wb") as out:
        upload.file.seek(0)
        shutil.copyfileobj(upload.file, out)
    return Path(name)


def decoded_audio(path: Path, max_seconds: float) -> np.ndarray:
    """The spooled upload decoded to mono 16 kHz, stopped as soon as it passes
    `max_seconds` (a small file can hold hours of low-bitrate audio); checked as a file
    run checks its input (complete, finite samples)."""
    limit = int(max_seconds * SAMPLE_RATE)
    pieces, samples = [], 0
    try:
        check_readable(path)
        info, chunks = open_stream(path)
        for piece in chunks:
            samples += piece.size
            if samples > limit:
                raise ApiError(
                    413,
                    f"the audio is longer than this server's limit of {max_seconds:g} s",
                    "file",
                    "audio_too_long",
                )
            if not np.isfinite(piece).all():
                raise non_finite_error(path, "non-finite samples (NaN/inf)")
            pieces.append(piece)
        if not samples:
            raise ApiError(400, "the uploaded file holds no audio", "file", "invalid_audio")
        check_complete(path, info, samples / SAMPLE_RATE)
    except KvscribeError as exc:
        raise from_kvscribe(exc) from None
    return np.concatenate(pieces)
