"""Qwen3-Coder / Qwen3.5 XML calls:
``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>
...</function>\\n</tool_call>``; string parameters raw, other values JSON."""

from __future__ import annotations

from ..grammar import NL, CallSpec, Lark, lit
from ..params import Strings, is_string_schema, props, text_value
from ..tool_calls import ToolFormat, checked_call
from .base import ToolFamily

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def _trim_newline(value: str) -> str:
    """Drop the one newline the format puts on each side of a value."""
    value = value.removeprefix("\n")
    return value.removesuffix("\n")


def parse_qwen3_coder(body: str, strings: Strings = None) -> tuple[str, dict] | None:
    """``<function=NAME><parameter=KEY>\\nVALUE\\n</parameter>...</function>``."""
    body = body.strip()
    if not body.startswith("<function="):
        return None
    name, sep, rest = body[len("<function=") :].partition(">")
    if not sep:
        return None
    rest = rest.removesuffix("</function>")
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
        value = _trim_newline(value if closed else value.rstrip())
        args[key.strip()] = text_value(value, key.strip(), strings, name.strip())
    return checked_call(name, args)


class Qwen3Coder(ToolFamily):
    name = "qwen3_coder"
    markers = (OPEN, CLOSE)
    format = ToolFormat(OPEN, CLOSE, parse_qwen3_coder)
    grammar_tokens = (CLOSE,)

    def forced_opening(self, name: str | None) -> str:
        return f"{OPEN}\n<function={name}>\n" if name else OPEN + "\n"

    def grammar(self, spec: CallSpec, chat_template: str) -> str:
        """``<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n...</function>\\n
        </tool_call>``."""
        g = Lark(spec, ("</parameter>", "<parameter=", OPEN, CLOSE))
        fns = []
        for i, f in enumerate(spec.functions):
            params = []
            for j, (key, schema, required) in enumerate(props(f)):
                head = lit(f"<parameter={key}>\n")
                if is_string_schema(schema):
                    value = g.text(f"s{i}_{j}", schema, spec.chars(f), "\n</parameter>")
                    body = f"{head} {value} {NL}"
                else:
                    body = f"{head} {g.json(schema)} {lit(chr(10) + '</parameter>' + chr(10))}"
                params.append(g.param(f"p{i}_{j}", body, required))
            header = [] if spec.header_forced else [lit(f"<function={f['name']}>\n")]
            fns.append(" ".join([*header, *params, lit("</function>")]))
        return g.calls(fns, f"{spec.mark(OPEN)} {NL}", f"{NL} {spec.mark(CLOSE)}", NL)
