"""How each model family writes one tool call: its markers and a parser for the text between.

A body parser returns ``(name, arguments)`` or None when the call is malformed (the caller then
gives the raw text back as content). Formats that write each value as text (qwen3_coder, glm45:
strings raw, other values JSON) take ``strings``, tool name -> the parameters whose schema is a
plain string (``string_params``); those values stay text even when they read as JSON ("123").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .base import json_value, loads_json

_NAME = re.compile(r"[^\s<>{}\"']+")
DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


@dataclass(frozen=True)
class ToolFormat:
    """open/close delimit one call; section markers (outside calls) are dropped once a call works."""

    open: str
    close: str
    parse: Callable[[str, Mapping[str, frozenset[str]] | None], tuple[str, dict] | None]
    section: tuple[str, ...] = ()


Strings = Mapping[str, frozenset[str]] | None


def is_string_schema(schema: object) -> bool:
    """A parameter schema whose values are always strings (written raw by the text-valued formats)."""
    if not isinstance(schema, dict):
        return False
    if "type" in schema:
        return schema["type"] == "string" or schema["type"] == ["string"]
    values = schema["enum"] if isinstance(schema.get("enum"), list) else [schema["const"]] if "const" in schema else []
    return bool(values) and all(isinstance(v, str) for v in values)


def string_params(tools: list[dict] | None) -> dict[str, frozenset[str]]:
    """Tool name -> names of its string-typed parameters, for tools in the OpenAI Chat form."""
    out = {}
    for t in tools or ():
        f = t.get("function", t)
        params = f.get("parameters") if isinstance(f.get("parameters"), dict) else {}
        props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
        out[f.get("name")] = frozenset(k for k, v in props.items() if is_string_schema(v))
    return out


def _value(text: str, key: str, keep: frozenset[str]) -> object:
    return text if key in keep else json_value(text)


def _call(name: str, args: object) -> tuple[str, dict] | None:
    name = name.strip()
    if not _NAME.fullmatch(name) or not isinstance(args, dict):
        return None
    return name, args


def parse_hermes(body: str, strings: Strings = None) -> tuple[str, dict] | None:
    """``{"name": NAME, "arguments": {...}}`` (arguments may also be a JSON string)."""
    try:
        obj = loads_json(body.strip())
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        args = obj.get("arguments", obj.get("parameters"))
        args = {} if args is None else loads_json(args) if isinstance(args, str) else args
    except ValueError:
        return None
    return _call(obj["name"], args)


def _trim_newline(value: str) -> str:
    """Drop the one newline the format puts on each side of a value."""
    value = value.removeprefix("\n")
    return value.removesuffix("\n")


def parse_qwen3_coder(body: str, strings: Strings = None) -> tuple[str, dict] | None:
    """``<function=NAME><parameter=KEY>\\nVALUE\\n</parameter>...</function>``."""
    body = body.strip()
    if not body.startswith("<function="):
        return None
    name, sep, rest = body[len("<function="):].partition(">")
    if not sep:
        return None
    rest = rest.removesuffix("</function>")
    keep = (strings or {}).get(name.strip(), frozenset())
    head, *params = rest.split("<parameter=")
    if head.strip():
        return None
    args = {}
    for param in params:
        key, sep, value = param.partition(">")
        if not sep or not key.strip():
            return None
        value, closed, tail = value.partition("</parameter>")
        if tail.strip():
            return None
        args[key.strip()] = _value(_trim_newline(value if closed else value.rstrip()), key.strip(), keep)
    return _call(name, args)


_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def parse_glm45(body: str, strings: Strings = None) -> tuple[str, dict] | None:
    """``NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>...``."""
    name, _, _ = body.partition("<arg_key>")
    keep = (strings or {}).get(name.strip(), frozenset())
    args = {m.group(1).strip(): _value(m.group(2), m.group(1).strip(), keep) for m in _GLM_ARG.finditer(body)}
    if _GLM_ARG.sub("", body[len(name):]).strip():
        return None
    return _call(name, args)


def _unfence(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.partition("\n")[2]
    return text.removesuffix("```").strip()


def parse_deepseek(body: str, strings: Strings = None) -> tuple[str, dict] | None:
    """V3: ``function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n````; V3.1: ``NAME<｜tool▁sep｜>{...}``."""
    head, sep, rest = body.partition(DS_SEP)
    if not sep:
        return None
    name = head
    if head.strip() == "function" and not rest.lstrip().startswith("{"):
        name, _, rest = rest.partition("\n")
    try:
        args = loads_json(_unfence(rest))
    except ValueError:
        return None
    return _call(name, args)


TOOL_FORMATS = MappingProxyType({
    "hermes": ToolFormat("<tool_call>", "</tool_call>", parse_hermes),
    "qwen3_coder": ToolFormat("<tool_call>", "</tool_call>", parse_qwen3_coder),
    "glm45": ToolFormat("<tool_call>", "</tool_call>", parse_glm45),
    "deepseek_v3": ToolFormat(DS_CALL_BEGIN, DS_CALL_END, parse_deepseek, (DS_CALLS_BEGIN, DS_CALLS_END)),
})
