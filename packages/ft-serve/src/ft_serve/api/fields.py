"""Request-body field readers: each returns the value or raises a 400 ApiError naming the field."""

from __future__ import annotations

import math
import re

from ft_serve.server.errors import bad_request

_MISSING = object()
INT64 = (-(1 << 63), (1 << 63) - 1)  # the range of an integer field such as ``seed``
_NAME = re.compile(r"[a-zA-Z0-9_-]+")


def _type_name(t) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        list: "an array",
        dict: "an object",
    }
    if isinstance(t, tuple):
        return " or ".join(names.get(x, x.__name__) for x in t)
    return names.get(t, t.__name__)


def field(
    body: dict, key: str, types, default=None, *, required: bool = False, path: str | None = None
):
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


def number(
    body: dict,
    key: str,
    default=None,
    lo: float | None = None,
    hi: float | None = None,
    *,
    integer: bool = False,
    path: str | None = None,
):
    v = field(body, key, int if integer else float, default, path=path)
    name = path or key
    if isinstance(v, float) and not math.isfinite(v):
        raise bad_request(f"'{name}' must be a finite number, got {v}", name)
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
        raise bad_request(
            f"'{name}' must be one of {', '.join(repr(o) for o in options)}, got {v!r}", name
        )
    return v


def stop_list(
    body: dict, key: str, most: int | None = None, one_string: bool = True
) -> tuple[str, ...]:
    """Stop strings: an array of strings (or one string when ``one_string``), at most ``most``."""
    v = field(body, key, (str, list) if one_string else list, None)
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,)
    for i, s in enumerate(v):
        if not isinstance(s, str):
            raise bad_request(f"'{key}[{i}]' must be a string", f"{key}[{i}]")
    if most is not None and len(v) > most:
        raise bad_request(f"'{key}' holds {len(v)} sequences; at most {most} are allowed", key)
    return tuple(v)


def name_of(obj: dict, key: str, path: str, most: int = 64) -> str:
    """A required name of letters, digits, '_' and '-', 1 to ``most`` characters (tool and
    schema names; OpenAI allows 64, Anthropic tool names 128)."""
    v = field(obj, key, str, required=True, path=path)
    if not _NAME.fullmatch(v) or len(v) > most:
        raise bad_request(
            f"'{path}' must be 1 to {most} characters of a-z, A-Z, 0-9, '_' or '-', "
            f"got {v[:80]!r}{'...' if len(v) > 80 else ''}",
            path,
        )
    return v


def object_schema(obj: dict, key: str, path: str, default=None, *, typed: bool = False):
    """A JSON schema that describes an object (tool parameters): a JSON object whose ``type``, when
    given (``typed``: it must be), is "object", with ``properties`` an object and ``required`` an
    array of strings."""
    v = field(obj, key, dict, default, required=typed, path=path)
    if v is None or v is default:
        return v
    if (typed or "type" in v) and v.get("type") != "object":
        raise bad_request(
            f"'{path}' must be a JSON schema of type \"object\", got type {v.get('type')!r}",
            f"{path}.type",
        )
    field(v, "properties", dict, None, path=f"{path}.properties")
    req = field(v, "required", list, None, path=f"{path}.required")
    if req is not None and not all(isinstance(x, str) for x in req):
        raise bad_request(
            f"'{path}.required' must be an array of property names", f"{path}.required"
        )
    return v


def logit_bias(body: dict, vocab_size: int) -> None:
    """``logit_bias``: a map of token-id strings to biases in [-100, 100]. Checked as the API
    does, then refused when not empty: the sampler has no per-token bias."""
    v = field(body, "logit_bias", dict, None)
    for k, b in (v or {}).items():
        p = f"logit_bias.{k}"
        if not k.isdigit() or int(k) >= vocab_size:
            raise bad_request(
                f"'logit_bias' keys must be token ids in [0, {vocab_size}), got {k!r}", p
            )
        number(v, k, None, -100, 100, path=p)
        if v[k] is None:
            raise bad_request(f"'{p}' must be a number in [-100, 100]", p)
    if v:
        raise bad_request(
            "'logit_bias' is not supported by this server (its sampler has no "
            "per-token bias); send it empty or leave it out",
            "logit_bias",
        )
