"""/v1/admin/memory: read and change the memory split at run time (DESIGN §5).

    GET  /v1/admin/memory  -> {"split": {...}, "minimum": {...}, "history": [...], "elastic": {...}}
    POST /v1/admin/memory {"total"|"kv"|"experts"|"states": bytes or "512MiB", ...}
         -> the applied record; 400 naming the field for a value that is not a size (wrong type,
            NaN, negative, over 8 PiB); 409 naming the part and its minimum when it cannot be held
            (below one request of max_model_len in the KV pool, or pages running requests hold):
            nothing changes

Access: the admin key or the API key (Bearer / x-api-key); with neither configured, loopback callers
only. Non-loopback callers get 403 unless the server was started with --admin-allow-remote.
"""

from __future__ import annotations

import ipaddress

from ft_core.memory import ResizeRefused, parse_bytes

from ft_serve.server.auth import require_key
from ft_serve.server.errors import ApiError, bad_request

_PARTS = ("total", "kv", "experts", "states")


def check_admin(config, request) -> None:
    host = request.client.host if request.client else ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not config.admin_allow_remote:
        raise ApiError(
            403,
            f"admin endpoints answer loopback callers only (this call came from {host}); start the "
            "server with --admin-allow-remote to allow others",
        )
    keys = [k for k in (config.admin_key, config.api_key) if k]
    if not keys:
        if not loopback:
            raise ApiError(
                403, "admin endpoints need --admin-key (or --api-key) for non-loopback callers"
            )
        return
    require_key(request, keys, "admin key (the admin key or the API key)")


async def _view(app) -> dict:
    """Split and history, read on the engine thread (between steps)."""

    def read(eng):
        hist = [
            {
                k: h[k]
                for k in ("time", "reason", "before", "after", "kv", "experts", "states", "seconds")
            }
            for h in eng.memory.history
        ]
        mm = eng.memory
        return {"split": mm.split(), "minimum": mm.minimum(), "history": hist, "resizes": mm.count}

    return {**await app.state.loop.call(read), "elastic": app.state.elastic_view()}


async def get_memory(app, request, body: dict):
    return await _view(app)


def _sizes(body: dict) -> dict[str, int]:
    """The parts asked for, in bytes; 400 naming the field for an unknown field, a value that is not
    a size (wrong type, NaN, negative, over 8 PiB) or a reason that is not a short string."""
    unknown = sorted(set(body) - set(_PARTS) - {"reason"})
    if unknown:
        raise bad_request(
            f"unknown field '{unknown[0]}'; send any of {', '.join(_PARTS)}", unknown[0]
        )
    reason = body.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > 200):
        raise bad_request("reason: expected a string of at most 200 characters", "reason")
    want = {}
    for k in _PARTS:
        if body.get(k) is not None:
            try:
                want[k] = parse_bytes(body[k], k)
            except ResizeRefused as e:
                raise bad_request(str(e), k) from None
    if not want:
        raise bad_request(
            f"send at least one of {', '.join(_PARTS)} (bytes, or a string such as '512MiB')"
        )
    return want


async def post_memory(app, request, body: dict):
    want = _sizes(body)
    reason = body.get("reason") or "admin"
    try:
        rec = await app.state.loop.call(lambda eng: eng.memory.resize(**want, reason=reason))
    except ResizeRefused as e:  # below a floor, or pages held by running requests: nothing changed
        raise ApiError(409, f"resize refused: {e}", e.field, "resize_refused") from None
    return {
        "applied": {
            k: rec[k] for k in ("reason", "before", "after", "kv", "experts", "states", "seconds")
        },
        **await _view(app),
    }
