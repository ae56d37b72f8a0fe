"""GLM-4.5 calls:
``<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n...</tool_call>``;
string parameters raw, other values JSON."""

from __future__ import annotations

import re

from ..grammar import NL, CallSpec, Lark, lit
from ..params import Strings, is_string_schema, props, text_value
from ..tool_calls import ToolFormat, checked_call
from .base import ToolFamily

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"
_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def parse_glm45(body: str, strings: Strings = None) -> tuple[str, dict] | None:
    """``NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>...``."""
    name, _, _ = body.partition(KEY)
    args = {
        m.group(1).strip(): text_value(m.group(2), m.group(1).strip(), strings, name.strip())
        for m in _ARG.finditer(body)
    }
    if _ARG.sub("", body[len(name) :]).strip():
        return None
    return checked_call(name, args)


class Glm45(ToolFamily):
    name = "glm45"
    markers = (OPEN, CLOSE, KEY, KEY_END, VALUE, VALUE_END)
    format = ToolFormat(OPEN, CLOSE, parse_glm45)
    grammar_tokens = (CLOSE,)

    def forced_opening(self, name: str | None) -> str:
        return f"{OPEN}{name}\n" if name else OPEN

    def grammar(self, spec: CallSpec, chat_template: str) -> str:
        """``NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n...</tool_call>``."""
        m = spec.mark
        g = Lark(spec, (KEY, KEY_END, VALUE, VALUE_END, OPEN, CLOSE))
        fns = []
        for i, f in enumerate(spec.functions):
            params = []
            for j, (key, schema, required) in enumerate(props(f)):
                value = (
                    g.text(f"s{i}_{j}", schema, spec.chars(f))
                    if is_string_schema(schema)
                    else g.json(schema)
                )
                body = (
                    f"{m(KEY)} {lit(key)} {m(KEY_END)} {NL} {m(VALUE)} {value} {m(VALUE_END)} {NL}"
                )
                params.append(g.param(f"p{i}_{j}", body.replace("  ", " "), required))
            header = [] if spec.header_forced else [lit(f"{f['name']}\n")]
            fns.append(" ".join([*header, *params]))
        return g.calls(fns, m(OPEN), m(CLOSE), NL)
