"""The server's API key, compared in constant time wherever a client presents it: the HTTP
routes' `Authorization` header (kvscribe.serve.app) and a realtime socket's header or
subprotocol (kvscribe.serve.realtime)."""

from __future__ import annotations

import hmac


def matches(given: str, key: str) -> bool:
    return hmac.compare_digest(given.encode(), key.encode())


def bearer_matches(authorization: str, key: str) -> bool:
    """`authorization` (the header's value) is `Bearer KEY` with this key."""
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and matches(given.strip(), key)
