"""Errors as OpenAI's API sends them: `{"error": {message, type, param, code}}` with the
status the `openai` SDK maps to a typed exception (400 BadRequestError, 401
AuthenticationError, 404 NotFoundError, 413, 429 RateLimitError, 5xx InternalServerError)."""

from __future__ import annotations

from dataclasses import dataclass

from kvscribe.errors import (
    AudioDecodeError,
    InputNotFoundError,
    KvscribeError,
    UsageError,
)

# OpenAI's error types by status.
_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",  # the client's upload was too slow
    413: "invalid_request_error",
    429: "rate_limit_error",  # kvscribe's queue is full, not a quota
    500: "server_error",
    503: "server_error",
}


# A backend's error names the command line's flag; the API has no field for these (the
# task is the route: a translation needs the server to run a multilingual model).
_API_FIELDS: dict[str, str | None] = {"--task": None}


@dataclass
class ApiError(Exception):
    status: int
    message: str
    param: str | None = None
    code: str | None = None
    retry_after: int | None = None  # seconds, sent as Retry-After (429, 503)

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": _TYPES.get(self.status, "server_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


def from_kvscribe(exc: KvscribeError, param: str = "file") -> ApiError:
    """A kvscribe error about one request as the API's: its input's faults are the client's
    (400), an engine's failure the server's (500). The message is kvscribe's one line
    without the server's paths (the upload's spooled name means nothing to the client)."""
    message = exc.message
    if exc.hint:
        message += f" ({exc.hint})"
    if isinstance(exc, (AudioDecodeError, InputNotFoundError)):
        return ApiError(400, f"the uploaded file: {message}", param, "invalid_audio")
    if isinstance(exc, UsageError):
        subject = exc.subject or param
        field = _API_FIELDS.get(subject, subject.lstrip("-"))
        return ApiError(400, f"{field}: {message}" if field else message, field, "invalid_value")
    return ApiError(500, f"the engine failed on this request: {message}", None, "engine_error")


def no_route(method: str, path: str, status: int, headers: dict | None) -> ApiError:
    """Starlette's 404 (no such route) and 405 (a route's other method) in OpenAI's shape."""
    if status == 405:
        allowed = (headers or {}).get("Allow", "")
        return ApiError(
            405, f"{method} is not allowed on {path}; use {allowed}", None, "method_not_allowed"
        )
    return ApiError(
        status,
        f"no route {method} {path} here: the API is POST /v1/audio/transcriptions and "
        "/v1/audio/translations, GET /v1/models (docs/server.md)",
        None,
        "not_found",
    )
