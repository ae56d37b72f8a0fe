"""Key checks shared by the API and admin endpoints: ``Authorization: Bearer KEY`` or ``x-api-key: KEY``."""

from __future__ import annotations

import hmac

from ft_serve.server.errors import ApiError


def require_key(request, keys: list[str], what: str) -> None:
    """Raise 401 unless the request presents one of ``keys`` (compared in constant time)."""
    got = request.headers.get("x-api-key") or ""
    auth = request.headers.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        got = got or auth[7:].strip()
    if not got:
        raise ApiError(401, f"missing {what}: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'")
    if not any(hmac.compare_digest(got.encode(), k.encode()) for k in keys):
        raise ApiError(401, f"invalid {what}")
