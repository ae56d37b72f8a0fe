"""Hermes (Qwen2.5/Qwen3 and many others):
``<tool_call>\\n{"name": N, "arguments": {...}}\\n</tool_call>``."""

from __future__ import annotations

import json

from ..base import loads_json
from ..grammar import COMPACT, CallSpec
from ..params import Strings
from ..tool_calls import ToolFormat, checked_call
from .base import ToolFamily

OPEN, CLOSE = "<tool_call>", "</tool_call>"


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
    return checked_call(obj["name"], args)


class Hermes(ToolFamily):
    name = "hermes"
    markers = (OPEN, CLOSE)
    format = ToolFormat(OPEN, CLOSE, parse_hermes)
    grammar_tokens = (OPEN, CLOSE)
    names_in_opening = False  # the grammar forces the name (a JSON const)

    def forced_opening(self, name: str | None) -> str:
        return OPEN + "\n"

    def grammar(self, spec: CallSpec, chat_template: str) -> str:
        """``{"name": N, "arguments": {...}}`` with the arguments schema of its tool (free-form when
        loose), then ``\\n</tool_call>``; when parallel further ``\\n<tool_call>\\n...`` calls."""
        variants = []
        for f in spec.functions:
            params = f.get("parameters")
            params = params if isinstance(params, dict) and not spec.loose else {"type": "object"}
            variants.append(
                {
                    "type": "object",
                    "properties": {"name": {"const": f["name"]}, "arguments": params},
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
            )
        schema = {"anyOf": variants} if len(variants) > 1 else variants[0]
        m = spec.mark
        more = f'("\\n" {m(OPEN)} "\\n" call "\\n" {m(CLOSE)})*' if spec.parallel else ""
        call = json.dumps({**schema, "x-guidance": COMPACT})
        return f'start: call "\\n" {m(CLOSE)} {more}\ncall: %json {call}\n'
