"""Request-body field readers: each returns the value or raises a 400 ApiError naming the field."""

from __future__ import annotations

from ft_serve.server.errors import bad_request

_MISSING = object()


def _type_name(t) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "an array", dict: "an object"}
    if isinstance(t, tuple):
        return " or ".join(names.get(x, x.__name__) for x in t)
    return names.get(t, t.__name__)


def field(body: dict, key: str, types, default=None, *, required: bool = False, path: str | None = None):
    """``body[key]`` checked against ``types`` (a type or tuple); ``None`` counts as absent."""
    name = path or key
    v = body.get(key, _MISSING) if isinstance(body, dict) else _MISSING
    if v is _MISSING or v is None:
        if required:
            raise bad_request(f"'{name}' is required", name)
        return default
    ts = types if isinstance(types, tuple) else (types,)
    if float in ts and int not in ts:
        ts = ts + (int,)
    if isinstance(v, bool) and bool not in ts:
        raise bad_request(f"'{name}' must be {_type_name(types)}, got a boolean", name)
    if not isinstance(v, ts):
        raise bad_request(f"'{name}' must be {_type_name(types)}, got {type(v).__name__}", name)
    return v


def number(body: dict, key: str, default=None, lo: float | None = None, hi: float | None = None, *,
           integer: bool = False, path: str | None = None):
    v = field(body, key, int if integer else float, default, path=path)
    name = path or key
    if v is not None and v is not default:
        if lo is not None and v < lo:
            raise bad_request(f"'{name}' must be >= {lo}, got {v}", name)
        if hi is not None and v > hi:
            raise bad_request(f"'{name}' must be <= {hi}, got {v}", name)
    return v


def choice(body: dict, key: str, options: tuple[str, ...], default=None, path: str | None = None):
    v = field(body, key, str, default, path=path)
    if v is not None and v not in options:
        name = path or key
        raise bad_request(f"'{name}' must be one of {', '.join(repr(o) for o in options)}, got {v!r}", name)
    return v


def stop_list(body: dict, key: str) -> tuple[str, ...]:
    v = field(body, key, (str, list), None)
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,)
    for i, s in enumerate(v):
        if not isinstance(s, str):
            raise bad_request(f"'{key}[{i}]' must be a string", f"{key}[{i}]")
    return tuple(v)
