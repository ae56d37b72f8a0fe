"""Lark pieces (llguidance's dialect, built as text) of the forced-call grammars the families write.

A family's grammar is what follows its forced opening: only the offered tools' names (or the named
one, when the opening holds its header), for each function only its declared parameters, the
required ones present, in declared order; then the close, further calls when ``parallel``, and the
end. Values follow each parameter's schema: a plain string (``is_string_schema``) is raw text,
every other value JSON of its schema (``%json``). A raw string may not spell the format's markers
(the parser would cut the call there) and holds at most ``chars`` characters, so a call always
closes (a sampler that never writes the closing marker by itself is cut off there).

    g = Lark(spec, ban=("</parameter>",)); body = g.text("s0_0", schema, 40, "\\n</parameter>")
    lark = g.calls([body_of_each_function], open_, close, sep, end)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from .params import free_string

# Compact JSON, as models write it (and no runs of whitespace a sampler could wander into).
COMPACT = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}


@dataclass(frozen=True)
class CallSpec:
    """functions: the OpenAI ``function`` dicts a call may name; header_forced: the one function's
    header (its name) is already in the forced opening; parallel: more calls may follow; chars: most
    characters of one raw string value of a function; mark: a marker as a grammar symbol
    (``<[id]>`` for an added token, else a literal); loose: JSON values free-form (the schemas
    were not usable)."""

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


class Lark:
    """Collects the rules and terminals of one grammar. ban: markers a raw string may not spell."""

    def __init__(self, spec: CallSpec, ban: tuple[str, ...]):
        self.spec, self.lines = spec, []
        self.ban = "|".join(_regex_escape(b) for b in ban)

    def add(self, head: str, body: str) -> str:
        self.lines.append(f"{head}: {body}")
        return head

    def json(self, schema: object) -> str:
        """A JSON value of ``schema`` (any JSON when the spec is loose or there is no schema)."""
        schema = schema if isinstance(schema, dict) and not self.spec.loose else {}
        return f"%json {json.dumps({**schema, 'x-guidance': COMPACT})}"

    def text(self, name: str, schema: dict, chars: int, end: str = "") -> str:
        """A raw string of ``schema``: enum/const literals, or a terminal of free text that spells
        no banned marker, of minLength..min(maxLength, chars) characters, then ``end`` in the same
        terminal (so the text ends at the first ``end``). May be empty ("") when ``end`` is."""
        values = (
            schema.get("enum")
            if isinstance(schema.get("enum"), list)
            else [schema["const"]]
            if "const" in schema
            else None
        )
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
        """The grammar: one call (a function body of ``fns``) and its close, then, when parallel,
        more calls after ``sep open_``, then ``end``."""
        call = (
            self.add("call", " | ".join(f"({b})" if b else '""' for b in fns))
            if len(fns) > 1 or fns[0]
            else ""
        )
        more = f" ({sep} {open_} {call} {close})*" if self.spec.parallel else ""
        self.add("start", f"{call} {close}{more} {end}".strip())
        return "\n".join(self.lines) + "\n"


def bounded(f: dict, chars: int) -> dict:
    """The parameters schema of ``f`` with a maxLength of ``chars`` on each free string property
    and, unless it says otherwise, no undeclared properties."""
    params = f.get("parameters") if isinstance(f.get("parameters"), dict) else {"type": "object"}
    declared = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    bound = {
        k: {**v, "maxLength": min(v.get("maxLength", chars), chars)} if free_string(v) else v
        for k, v in declared.items()
    }
    return {"additionalProperties": False, **params, "properties": bound}
