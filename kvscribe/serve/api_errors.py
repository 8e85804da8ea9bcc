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
    413: "invalid_request_error",
    429: "rate_limit_error",  # kvscribe's queue is full, not a quota
    500: "server_error",
    503: "server_error",
}


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
        return ApiError(400, f"{subject}: {message}", subject.lstrip("-"), "invalid_value")
    return ApiError(500, f"the engine failed on this request: {message}", None, "engine_error")
