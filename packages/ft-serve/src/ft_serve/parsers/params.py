"""The tools' declared parameters as the tool-call families read them.

``tools`` are in the OpenAI Chat form
``[{"type": "function", "function": {"name", "parameters"}}]``.
Formats that write each value as text (qwen3_coder, glm45) keep a string-typed parameter's value
as text even when it reads as JSON ("123"); ``Strings`` maps tool name -> those parameter names.
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import json_value

Strings = Mapping[str, frozenset[str]] | None


def is_string_schema(schema: object) -> bool:
    """A parameter schema whose values are always strings (text-valued formats write them raw)."""
    if not isinstance(schema, dict):
        return False
    if "type" in schema:
        return schema["type"] == "string" or schema["type"] == ["string"]
    values = (
        schema["enum"]
        if isinstance(schema.get("enum"), list)
        else [schema["const"]]
        if "const" in schema
        else []
    )
    return bool(values) and all(isinstance(v, str) for v in values)


def free_string(schema: object) -> bool:
    """A raw string value of unbounded text (not an enum or const)."""
    return is_string_schema(schema) and "enum" not in schema and "const" not in schema


def props(f: dict) -> list[tuple[str, object, bool]]:
    """(name, schema, required) of each declared parameter of OpenAI ``function`` f, in order."""
    params = f.get("parameters") if isinstance(f.get("parameters"), dict) else {}
    declared = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    required = set(params.get("required") or ())
    return [(k, v, k in required) for k, v in declared.items()]


def string_params(tools: list[dict] | None) -> dict[str, frozenset[str]]:
    """Tool name -> names of its string-typed parameters, for tools in the OpenAI Chat form."""
    out = {}
    for t in tools or ():
        f = t.get("function", t)
        params = f.get("parameters") if isinstance(f.get("parameters"), dict) else {}
        declared = params.get("properties") if isinstance(params.get("properties"), dict) else {}
        out[f.get("name")] = frozenset(k for k, v in declared.items() if is_string_schema(v))
    return out


def text_value(text: str, key: str, strings: Strings, name: str) -> object:
    """Parameter ``key`` of tool ``name`` written as text: kept as text when string-typed in
    ``strings``, else its JSON value when it parses as JSON (``json_value``)."""
    return text if key in (strings or {}).get(name, frozenset()) else json_value(text)
