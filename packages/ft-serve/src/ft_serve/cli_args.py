"""The flags of ``ft serve`` and ``ft generate``: ``engine_args`` (what becomes the EngineConfig)
and ``server_args`` (what becomes the ServerConfig: network, keys, limits, browsers, elastic)."""

from __future__ import annotations

import argparse

from ft_core.config import options
from ft_serve.parsers import PARSER_NAMES


_TRISTATE = {"auto": None, "on": True, "off": False}  # an optional bool's flag values


def engine_args(p: argparse.ArgumentParser) -> None:
    """One flag per EngineConfig field, derived from the field (ft_core.config.options: type, choices, default,
    help, flag name, units); ``engine_kwargs`` maps the parsed values back."""
    for o in options():
        help = o.help.replace("%", "%%")
        if o.kind is bool and not o.optional:  # a flag that flips the default
            p.add_argument(
                o.flag, dest=o.name, action="store_false" if o.default else "store_true", help=help
            )
        elif o.kind is bool:
            p.add_argument(o.flag, dest=o.name, default="auto", choices=list(_TRISTATE), help=help)
        elif o.units == "bytes":
            p.add_argument(o.flag, dest=o.name, default=None, metavar="BYTES", help=help)
        else:
            p.add_argument(
                o.flag,
                dest=o.name,
                type=o.kind,
                default=o.default,
                choices=o.choices,
                metavar=o.metavar,
                help=help,
            )


def engine_kwargs(args: argparse.Namespace) -> dict:
    """The parsed engine flags as EngineConfig keyword arguments (sizes parsed; flags left out keep the field's
    default); ``model`` may be None (the demo model)."""
    from ft_core.memory import parse_bytes

    kw = {}
    for o in options():
        v = getattr(args, o.name)
        if o.kind is bool and o.optional:
            v = _TRISTATE[v]
        elif o.units == "bytes":
            if v is None:
                continue
            v = parse_bytes(v, o.flag)
        kw[o.name] = v
    return kw


def _browser_args(s: argparse.ArgumentParser) -> None:
    """Who may call the server from a web page (server/guard.py; README "Browsers")."""
    s.add_argument(
        "--allowed-origins",
        default="",
        metavar="ORIGINS",
        help="comma-separated origins of web pages that may call the server "
        "(CORS), e.g. http://localhost:3000; '*' in one matches up to the next "
        "'/'; '*' alone: any page (default: none; other pages get 403, even "
        "ones on localhost)",
    )
    s.add_argument(
        "--allowed-hosts",
        default="",
        metavar="NAMES",
        help="comma-separated host names the server answers to besides IP "
        "addresses, localhost and --host (default: none: other Host headers get "
        "403, which blocks DNS rebinding); '*': any (behind a proxy that checks "
        "names)",
    )
    s.add_argument(
        "--metrics-public",
        action="store_true",
        help="serve /metrics without the API key (default: it needs the key when one is set)",
    )


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list flag -> its non-empty items."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def server_args(s: argparse.ArgumentParser) -> None:
    """``ft serve``'s own flags (ServerConfig)."""
    s.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default: 127.0.0.1, this machine only)",
    )
    s.add_argument(
        "--port", type=int, default=8000, help="TCP port (default: 8000; 0 picks a free one)"
    )
    s.add_argument(
        "--api-key",
        default=None,
        help="require this key (Authorization: Bearer KEY or x-api-key) on /v1 and "
        "/metrics (default: --api-key-file, else $FT_API_KEY, else none; a key "
        "given here is visible to other users in `ps`)",
    )
    s.add_argument(
        "--api-key-file", default=None, metavar="PATH", help="read the API key from PATH"
    )
    s.add_argument(
        "--served-model-name",
        default=None,
        help="model id clients use (default: the checkpoint folder's name)",
    )
    s.add_argument(
        "--max-running-requests",
        type=int,
        default=16,
        help="requests decoding together (default: 16)",
    )
    s.add_argument(
        "--max-waiting-requests",
        type=int,
        default=256,
        help="queued requests before 503 (default: 256)",
    )
    s.add_argument(
        "--tool-call-parser",
        default="auto",
        choices=["auto", *PARSER_NAMES["tool"]],
        help="tool-call format of the model's output (default: auto, from the checkpoint)",
    )
    s.add_argument(
        "--reasoning-parser",
        default="auto",
        choices=["auto", *PARSER_NAMES["reasoning"]],
        help="reasoning format of the model's output (default: auto, from the checkpoint)",
    )
    s.add_argument(
        "--drain-seconds",
        type=float,
        default=30.0,
        help="on SIGINT/SIGTERM, time running requests get to finish",
    )
    s.add_argument(
        "--max-body-size",
        default="32MiB",
        metavar="BYTES",
        help="largest request body (default 32MiB); a larger one gets 413",
    )
    s.add_argument(
        "--engine-stall-seconds",
        type=float,
        default=300.0,
        help="/health answers 503 'wedged' when the engine has work and has not "
        "finished a step for this long (default 300; a long CPU prefill is no stall)",
    )
    s.add_argument(
        "--admin-key",
        default=None,
        help="key for /v1/admin/* (default: --admin-key-file, else $FT_ADMIN_KEY; "
        "the API key also works; with neither, loopback only)",
    )
    s.add_argument(
        "--admin-key-file", default=None, metavar="PATH", help="read the admin key from PATH"
    )
    s.add_argument(
        "--admin-allow-remote",
        action="store_true",
        help="answer /v1/admin/* from non-loopback addresses",
    )
    _browser_args(s)
    s.add_argument(
        "--elastic",
        default="off",
        choices=["off", "auto"],
        help="auto: shrink the memory budget when other programs take device memory, grow it back later",
    )
    s.add_argument(
        "--elastic-source",
        default="cuda",
        metavar="cuda|file:PATH",
        help="where --elastic auto reads free device memory (file:PATH holds a byte count: a simulation)",
    )
    s.add_argument(
        "--elastic-reserve",
        default="1GiB",
        metavar="BYTES",
        help="device memory --elastic auto leaves free for other programs (default: 1GiB)",
    )
    s.add_argument(
        "--elastic-interval",
        type=float,
        default=1.0,
        help="seconds between free-memory polls (default: 1)",
    )
    s.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="HTTP server log level",
    )
