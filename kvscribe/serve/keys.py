"""The server's API key, compared in constant time wherever a client presents it: the HTTP
routes' `Authorization` header (kvscribe.serve.app) and a realtime socket's header or
subprotocol (kvscribe.serve.realtime_socket)."""

from __future__ import annotations

import hmac
import re

# A WebSocket subprotocol is an HTTP token: how a browser sends the key.
_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


def matches(given: str, key: str) -> bool:
    return hmac.compare_digest(given.encode(), key.encode())


def bearer_matches(authorization: str, key: str) -> bool:
    """`authorization` (the header's value) is `Bearer KEY` with this key."""
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and matches(given.strip(), key)


def browser_can_send(key: str) -> bool:
    """Whether a browser can offer `key` as the `openai-insecure-api-key.KEY` subprotocol."""
    return _TOKEN.fullmatch(key) is not None
