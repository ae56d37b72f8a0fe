"""Lark grammars (llguidance) of forced tool calls in the text-valued, DeepSeek and harmony call formats.

Each builder returns the grammar of what follows the forced opening (``service._FORCED``): only the
offered tools' names (or the named one, whose header is already forced), for each function only its
declared parameters, the required ones present, in declared order; then the close, further calls when
``parallel``, and the end. Values follow each parameter's schema: a plain string (``is_string_schema``)
is raw text, every other value JSON of its schema (``%json``). A raw string may not spell the format's
markers (the parser would cut the call there) and holds at most ``chars`` characters, so a call always
closes (a sampler that never writes the closing marker by itself is cut off there).

    lark = qwen3_coder(CallSpec(functions, named, parallel, chars, mark))
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from ft_serve.parsers.tool_formats import DS_CALL_BEGIN, DS_CALL_END, DS_CALLS_END, DS_SEP, is_string_schema

# Compact JSON, as models write it (and no runs of whitespace a sampler could wander into).
COMPACT = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}


@dataclass(frozen=True)
class CallSpec:
    """functions: the OpenAI ``function`` dicts a call may name; header_forced: the one function's header
    (its name) is already in the forced opening; parallel: more calls may follow; chars: most characters
    of one raw string value of a function; mark: a marker as a grammar symbol (``<[id]>`` for an added
    token, else a literal); loose: JSON values free-form (the schemas were not usable)."""

    functions: list[dict]
    header_forced: bool
    parallel: bool
    chars: Callable[[dict], int]
    mark: Callable[[str], str]
    loose: bool = False


def lit(text: str) -> str:
    """A Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


NL = lit("\n")


def _regex_escape(text: str) -> str:
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$#&-~/" else c for c in text)


def props(f: dict) -> list[tuple[str, object, bool]]:
    """(name, schema, required) of each declared parameter, in order."""
    params = f.get("parameters") if isinstance(f.get("parameters"), dict) else {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    required = set(params.get("required") or ())
    return [(k, v, k in required) for k, v in props.items()]


def free_string(schema: object) -> bool:
    """A raw string value of unbounded text (not an enum or const)."""
    return is_string_schema(schema) and "enum" not in schema and "const" not in schema


class _Lark:
    """Collects the rules and terminals of one grammar."""

    def __init__(self, spec: CallSpec, ban: tuple[str, ...]):
        self.spec, self.lines = spec, []
        self.ban = "|".join(_regex_escape(b) for b in ban)

    def add(self, head: str, body: str) -> str:
        self.lines.append(f"{head}: {body}")
        return head

    def json(self, schema: object) -> str:
        schema = schema if isinstance(schema, dict) and not self.spec.loose else {}
        return f"%json {json.dumps({**schema, 'x-guidance': COMPACT})}"

    def text(self, name: str, schema: dict, chars: int, end: str = "") -> str:
        """A raw string of ``schema``: enum/const literals, or a terminal of free text that spells no
        banned marker, of minLength..min(maxLength, chars) characters, then ``end`` in the same terminal
        (so the text ends at the first ``end``). May be empty ("") when ``end`` is."""
        values = schema.get("enum") if isinstance(schema.get("enum"), list) else \
            [schema["const"]] if "const" in schema else None
        if values:
            return "(" + " | ".join(lit(v + end) for v in values) + ")"
        lo = max(0, int(schema.get("minLength", 0)))
        hi = max(lo, min(int(schema.get("maxLength", chars)), chars))
        if not end and hi == 0:
            return ""
        body = f"(/(.|\\n){{{max(lo, 0 if end else 1)},{hi}}}/ & ~/(.|\\n)*({self.ban})(.|\\n)*/)"
        term = self.add(name.upper(), body + (" " + lit(end) if end else ""))
        return term if end or lo > 0 else term + "?"

    def param(self, name: str, body: str, required: bool) -> str:
        return self.add(name, body) + ("" if required else "?")

    def calls(self, fns: list[str], open_: str, close: str, sep: str, end: str = "") -> str:
        """The grammar: one call (a function body of ``fns``) and its close, then, when parallel, more
        calls after ``sep open_``, then ``end``."""
        call = self.add("call", " | ".join(f"({b})" if b else '""' for b in fns)) if len(fns) > 1 or fns[0] else ""
        more = f" ({sep} {open_} {call} {close})*" if self.spec.parallel else ""
        self.add("start", f"{call} {close}{more} {end}".strip())
        return "\n".join(self.lines) + "\n"


def qwen3_coder(spec: CallSpec) -> str:
    """``<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n...</function>\\n</tool_call>``."""
    g = _Lark(spec, ("</parameter>", "<parameter=", "<tool_call>", "</tool_call>"))
    fns = []
    for i, f in enumerate(spec.functions):
        params = []
        for j, (key, schema, required) in enumerate(props(f)):
            head = lit(f"<parameter={key}>\n")
            if is_string_schema(schema):
                body = f"{head} {g.text(f's{i}_{j}', schema, spec.chars(f), chr(10) + '</parameter>')} {NL}"
            else:
                body = f"{head} {g.json(schema)} {lit(chr(10) + '</parameter>' + chr(10))}"
            params.append(g.param(f"p{i}_{j}", body, required))
        header = [] if spec.header_forced else [lit(f"<function={f['name']}>\n")]
        fns.append(" ".join([*header, *params, lit("</function>")]))
    return g.calls(fns, f"{spec.mark('<tool_call>')} {NL}", f"{NL} {spec.mark('</tool_call>')}", NL)


def glm45(spec: CallSpec) -> str:
    """``NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n...</tool_call>``."""
    m = spec.mark
    g = _Lark(spec, ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<tool_call>", "</tool_call>"))
    fns = []
    for i, f in enumerate(spec.functions):
        params = []
        for j, (key, schema, required) in enumerate(props(f)):
            value = g.text(f"s{i}_{j}", schema, spec.chars(f)) if is_string_schema(schema) else g.json(schema)
            body = f"{m('<arg_key>')} {lit(key)} {m('</arg_key>')} {NL} {m('<arg_value>')} {value} {m('</arg_value>')} {NL}"
            params.append(g.param(f"p{i}_{j}", body.replace("  ", " "), required))
        header = [] if spec.header_forced else [lit(f"{f['name']}\n")]
        fns.append(" ".join([*header, *params]))
    return g.calls(fns, m("<tool_call>"), m("</tool_call>"), NL)


def deepseek_v3(spec: CallSpec, fenced: bool) -> str:
    """V3.1: ``NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``; ``fenced`` (V3): ``function<｜tool▁sep｜>NAME\\n```json\\n
    {...}\\n```<｜tool▁call▁end｜>``; then ``<｜tool▁calls▁end｜>``. The name is never forced."""
    m = spec.mark
    g = _Lark(spec, ())
    fns = []
    for f in spec.functions:
        params = _bounded(f, spec.chars(f))
        if fenced:
            fns.append(f"{lit('function')} {m(DS_SEP)} {lit(f['name'] + chr(10) + '```json' + chr(10))} "
                       f"{g.json(params)} {lit(chr(10) + '```')}")
        else:
            fns.append(f"{lit(f['name'])} {m(DS_SEP)} {g.json(params)}")
    return g.calls(fns, m(DS_CALL_BEGIN), m(DS_CALL_END), "", m(DS_CALLS_END))


def harmony(spec: CallSpec) -> str:
    """GPT-OSS: ``NAME <|constrain|>json<|message|>{...}<|call|>`` after ``<|channel|>commentary to=functions.``
    (a named tool's whole header is forced). One call: ``<|call|>`` ends the turn."""
    m = spec.mark
    g = _Lark(spec, ())
    fns = []
    for f in spec.functions:
        header = [] if spec.header_forced else [f"{lit(f['name'] + ' ')} {m('<|constrain|>')} {lit('json')} {m('<|message|>')}"]
        fns.append(" ".join([*header, g.json(_bounded(f, spec.chars(f)))]))
    return g.calls(fns, "", m("<|call|>"), "")


def _bounded(f: dict, chars: int) -> dict:
    """The parameters schema of ``f`` with a maxLength of ``chars`` on each free string property and, unless
    it says otherwise, no undeclared properties."""
    params = f.get("parameters") if isinstance(f.get("parameters"), dict) else {"type": "object"}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    bound = {k: {**v, "maxLength": min(v.get("maxLength", chars), chars)} if free_string(v) else v for k, v in props.items()}
    return {"additionalProperties": False, **params, "properties": bound}


BUILDERS = {"qwen3_coder": qwen3_coder, "glm45": glm45, "harmony": harmony}
