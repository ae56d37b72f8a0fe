"""DeepSeek V3 / V3.1 calls inside ``<｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜>``:
V3 ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``,
V3.1 ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``."""

from __future__ import annotations

from ..base import loads_json
from ..grammar import CallSpec, Lark, bounded, lit
from ..params import Strings
from ..tool_calls import ToolFormat, checked_call
from .base import ToolFamily

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _unfence(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.partition("\n")[2]
    return text.removesuffix("```").strip()


def parse_deepseek(body: str, strings: Strings = None) -> tuple[str, dict] | None:
    """V3: ``function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n````; V3.1: ``NAME<｜tool▁sep｜>{...}``."""
    head, sep, rest = body.partition(SEP)
    if not sep:
        return None
    name = head
    if head.strip() == "function" and not rest.lstrip().startswith("{"):
        name, _, rest = rest.partition("\n")
    try:
        args = loads_json(_unfence(rest))
    except ValueError:
        return None
    return checked_call(name, args)


class DeepseekV3(ToolFamily):
    name = "deepseek_v3"
    markers = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
    format = ToolFormat(CALL_BEGIN, CALL_END, parse_deepseek, (CALLS_BEGIN, CALLS_END))
    grammar_tokens = (SEP,)
    names_in_opening = False  # the name is never forced (it comes first in V3.1, after SEP in V3)

    def forced_opening(self, name: str | None) -> str:
        return CALLS_BEGIN + CALL_BEGIN

    def grammar(self, spec: CallSpec, chat_template: str) -> str:
        """V3.1: ``NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``;
        V3 (its template writes ```json fences):
        ``function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``; then
        ``<｜tool▁calls▁end｜>``."""
        fenced = "```json" in chat_template
        m = spec.mark
        g = Lark(spec, ())
        fns = []
        for f in spec.functions:
            params = bounded(f, spec.chars(f))
            if fenced:
                head = lit(f"{f['name']}\n```json\n")
                tail = lit("\n```")
                fns.append(f"{lit('function')} {m(SEP)} {head} {g.json(params)} {tail}")
            else:
                fns.append(f"{lit(f['name'])} {m(SEP)} {g.json(params)}")
        return g.calls(fns, m(CALL_BEGIN), m(CALL_END), "", m(CALLS_END))
