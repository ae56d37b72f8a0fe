"""Browser rules in front of every route (a pure ASGI middleware): no web page may drive the server.

    app = Guard(starlette_app, GuardRules.from_config(config))

The threat: the user runs ``ft serve`` on their machine and opens any web page. That page can send
"simple" cross-origin requests (a ``text/plain`` or form POST needs no CORS preflight: the browser
sends it and only hides the answer), and with DNS rebinding (its own name re-pointed at 127.0.0.1)
it talks to the server as a same-origin page and reads every answer. So, before any work (before
the body is read):

1. ``Host`` must be the server's own: an IP literal (DNS rebinding needs a name), ``localhost``,
   the ``--host`` name, or a name in ``--allowed-hosts`` (``*``: any, e.g. behind a reverse proxy
   that checks names itself). Otherwise 403.
2. ``Origin``, when present (browsers send it on every cross-origin request and every POST), must
   be the server's own origin (scheme://Host of this request: a page ft itself served, which ft
   does not do today) or match ``--allowed-origins`` (``*`` any page; ``*`` in an entry matches
   any characters up to the next ``/``, e.g. ``http://localhost:*``). Other loopback origins are
   not trusted: a page on http://localhost:3000 is another program. Otherwise 403. Requests
   without ``Origin`` (curl, SDKs, agent CLIs) are not browsers' cross-origin requests.
3. Allowed origins get CORS: preflight ``OPTIONS`` is answered 204 with ``Access-Control-*``, and
   responses carry ``Access-Control-Allow-Origin``. No credentials (ft uses no cookies; keys travel
   in headers the preflight allows).
4. A body (POST/PUT/PATCH) must be ``Content-Type: application/json`` (parameters such as
   ``; charset=utf-8`` allowed): the content types a page may send without a preflight are never
   JSON, so this closes the simple-request hole even for a listed origin. Otherwise 415.

Refusals are answered in the called API's error schema (Anthropic under /v1/messages).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass

from ft_core.errors import FTError

from ft_serve.server.errors import ApiError, error_response, schema_of

log = logging.getLogger("ft.serve")

_WILDCARD_BINDS = {"", "0.0.0.0", "::", "[::]", "*"}
_BODY_METHODS = {"POST", "PUT", "PATCH"}
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name


def host_name(host: str) -> str:
    """The name of a ``Host`` header value: lower case, no port, no brackets, no trailing dot."""
    h = host.strip().lower()
    if h.startswith("["):
        h = h[1 : h.find("]")] if "]" in h else h[1:]
    elif h.count(":") == 1:
        h = h.split(":")[0]
    return h.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _origin_pattern(entry: str) -> re.Pattern:
    """An ``--allowed-origins`` entry -> a regex over normalised origins; ``*``: any non-``/``s."""
    parts = entry.strip().lower().rstrip("/").split("*")
    return re.compile("[^/]*".join(re.escape(p) for p in parts))


@dataclass(frozen=True)
class GuardRules:
    """What the guard lets through. ``hosts``: names answered besides IP literals; ``origins``:
    compiled ``--allowed-origins`` patterns (``any_origin`` for ``*``)."""

    hosts: frozenset[str]
    any_host: bool = False
    origins: tuple[re.Pattern, ...] = ()
    any_origin: bool = False

    @classmethod
    def from_config(cls, config) -> "GuardRules":
        hosts = {"localhost"} | {host_name(h) for h in config.allowed_hosts if h.strip() != "*"}
        if config.host.strip().lower() not in _WILDCARD_BINDS:
            hosts.add(host_name(config.host))
        origins = [o for o in config.allowed_origins if o.strip()]
        for o in origins:
            if o.strip() not in ("*", "null") and "://" not in o:
                raise FTError(
                    f"--allowed-origins {o!r}: an origin is scheme://host[:port], e.g. "
                    "http://localhost:3000 (or '*' for any page)"
                )
        return cls(
            frozenset(hosts),
            any(h.strip() == "*" for h in config.allowed_hosts),
            tuple(_origin_pattern(o) for o in origins if o.strip() != "*"),
            any(o.strip() == "*" for o in origins),
        )

    def host_ok(self, host: str | None) -> bool:
        if host is None or self.any_host:  # no Host: HTTP/1.0, not a browser
            return True
        name = host_name(host)
        return _is_ip(name) or name in self.hosts

    def listed(self, origin: str) -> bool:
        """A page of ``origin`` may call (``--allowed-origins``): it gets CORS headers."""
        o = origin.strip().lower().rstrip("/")
        return self.any_origin or any(p.fullmatch(o) for p in self.origins)

    def own(self, origin: str, host: str | None) -> bool:
        """``origin`` is this server itself (the request's scheme-less Host, behind TLS or not)."""
        o = origin.strip().lower().rstrip("/")
        return host is not None and o in (
            f"http://{host.strip().lower()}",
            f"https://{host.strip().lower()}",
        )


def _headers(scope) -> dict[str, str]:
    """Request headers by lower-case name (the first of repeated ones; repeated Origins are joined
    with a space so that they never match)."""
    out: dict[str, str] = {}
    for k, v in scope.get("headers", ()):
        name = k.decode("latin-1").lower()
        value = v.decode("latin-1")
        if name == "origin" and name in out:
            value = f"{out[name]} {value}"
        out[name] = value if name == "origin" else out.get(name, value)
    return out


def _preflight_headers(origin: str, h: dict[str, str]) -> list[tuple[bytes, bytes]]:
    asked = [x.strip() for x in h.get("access-control-request-headers", "").split(",") if x.strip()]
    allow = ", ".join(x for x in asked if _TOKEN.match(x))
    allow = allow or "authorization, content-type, x-api-key"
    out = [
        ("access-control-allow-origin", origin),
        ("vary", "Origin"),
        ("access-control-allow-methods", "GET, POST, OPTIONS"),
        ("access-control-allow-headers", allow),
        ("access-control-max-age", "600"),
    ]
    if h.get("access-control-request-private-network", "").lower() == "true":
        out.append(("access-control-allow-private-network", "true"))  # Chrome's local-network check
    return [(k.encode(), v.encode("latin-1")) for k, v in out]


class Guard:
    """The ASGI middleware applying ``GuardRules`` to every HTTP request (module docstring)."""

    def __init__(self, app, rules: GuardRules):
        self.app, self.rules = app, rules
        self._logged: set[tuple[str, str]] = set()  # one warning per refused host / origin

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        h = _headers(scope)
        origin, method = h.get("origin"), scope["method"]
        refusal = self._refusal(h, origin, method)
        if refusal is not None:
            return await error_response(refusal, schema_of(scope["path"]))(scope, receive, send)
        cors = origin is not None and self.rules.listed(origin)
        if method == "OPTIONS" and origin is not None and "access-control-request-method" in h:
            await send(
                {
                    "type": "http.response.start",
                    "status": 204,
                    "headers": _preflight_headers(origin, h),
                }
            )
            return await send({"type": "http.response.body", "body": b""})
        if not cors:
            return await self.app(scope, receive, send)
        extra = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
            (b"access-control-expose-headers", b"retry-after"),
        ]

        async def send_cors(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        return await self.app(scope, receive, send_cors)

    def _refusal(self, h: dict[str, str], origin: str | None, method: str) -> ApiError | None:
        """The 403 / 415 for this request, or None to let it through."""
        host = h.get("host")
        if not self.rules.host_ok(host):
            name = host_name(host)
            self._warn("host", name)
            return ApiError(
                403,
                f"Host {name!r} is not a name of this server (refused: a web "
                "page reaching the server under its own name is DNS rebinding); "
                "connect by IP address or localhost, or start it with "
                f"--allowed-hosts {name}",
                code="host_not_allowed",
            )
        if origin is not None and not (self.rules.listed(origin) or self.rules.own(origin, host)):
            self._warn("origin", origin)
            return ApiError(
                403,
                f"requests from web pages of origin {origin!r} are refused (a "
                "page the user opens must not drive this server); start it with "
                f"--allowed-origins {origin} to let that page call it",
                code="origin_not_allowed",
            )
        ctype = h.get("content-type", "")
        if method in _BODY_METHODS and ctype.split(";")[0].strip().lower() != "application/json":
            return ApiError(
                415,
                "the body must be JSON sent with 'Content-Type: "
                f"application/json' (got {ctype or 'no Content-Type'}); with curl "
                "add -H 'Content-Type: application/json'",
                code="unsupported_media_type",
            )
        return None

    def _warn(self, kind: str, value: str) -> None:
        if (kind, value) not in self._logged and len(self._logged) < 64:
            self._logged.add((kind, value))
            log.warning(
                "refused a request with %s %r (browser rules; see ft serve --help)", kind, value
            )
