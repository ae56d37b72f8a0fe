"""The harmony format (GPT-OSS): messages with a header, a channel and a recipient.

Generated text (the prompt ends in ``<|start|>assistant``) is a run of messages::

    HEADER<|message|>BODY<|end|>  then  <|start|>assistant HEADER<|message|>BODY<|call|> ...

HEADER holds ``<|channel|>CHANNEL``, perhaps a recipient ``to=functions.NAME`` (before or after
the channel) and a content type (``<|constrain|>json`` or ``json``). analysis -> reasoning,
final -> content, a recipient -> a tool call (JSON body), commentary without one -> content.
Bodies stream, except tool calls, which are buffered until their terminator. Stop tokens
(``<|call|>``, ``<|return|>``) may be missing at the end: a pending call still completes at
``finish`` when its JSON is whole. A forced call opens ``<|channel|>commentary to=functions.``.
"""

from __future__ import annotations

import re

from ..base import (
    Event,
    OutputParser,
    call_events,
    emit,
    find_first,
    loads_json,
    partial_len,
)
from ..grammar import CallSpec, Lark, bounded, lit
from .base import ToolFamily

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
BODY_STOPS = (*ENDS, START, CHANNEL)  # a body ends at a terminator (or, leniently, a new header)
HEADER_OPENINGS = (START, "assistant", CHANNEL, " to=", "to=", CONSTRAIN, MESSAGE)
MAX_HEADER = 512

_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")


class HarmonyParser(OutputParser):
    """Reasoning, content and tool calls from harmony text.

    starts_in_reasoning: the prompt already opened an analysis message, so output begins in its
    body. tools_enabled=False: a message to a recipient is content (its body).
    """

    def __init__(self, *, starts_in_reasoning: bool = False, tools_enabled: bool = True) -> None:
        super().__init__()
        self._tools = tools_enabled
        self._buf = ""
        self._in_body = starts_in_reasoning
        self._kind = "reasoning" if starts_in_reasoning else "content"  # reasoning|content|tool
        self._name = ""  # body of a tool call: the function name
        self._header = ""  # raw header of the current message (given back if its call fails)
        self._scan_from = 0

    def feed(self, delta: str) -> list[Event]:
        self._buf += delta
        out: list[Event] = []
        while self._buf and (self._step_body(out) if self._in_body else self._step_header(out)):
            pass
        return out

    def finish(self) -> list[Event]:
        buf, self._buf = self._buf, ""
        if not self._in_body:
            return emit("content", buf)
        self._in_body = False
        if self._kind == "tool":
            return self._close_call(buf, "")
        return emit(self._kind, buf)

    def _step_header(self, out: list[Event]) -> bool:
        buf = self._buf
        opens = any(buf.startswith(p) or p.startswith(buf) for p in HEADER_OPENINGS)
        if not opens or len(buf) > MAX_HEADER:
            self._open_body("", "content")  # not a header: plain text
            return True
        i, marker = find_first(buf, (MESSAGE, *ENDS))
        j = buf.find(START, 1)  # a header may open with <|start|>, not hold one
        if j >= 0 and (i < 0 or j < i):
            i, marker = j, START
        if i < 0:
            return False
        if marker == MESSAGE:
            self._open_message(buf[:i])
            self._buf = buf[i + len(MESSAGE) :]
        else:  # a header cut short: give it back as text
            cut = i + (len(marker) if marker in ENDS else 0)
            out += emit("content", buf[:cut])
            self._buf = buf[cut:]
        return True

    def _open_message(self, header: str) -> None:
        recipient = _RECIPIENT.search(header)
        channel = _CHANNEL.search(header)
        if recipient and self._tools:
            self._name = recipient.group(1).removeprefix("functions.")
            kind = "tool"
        elif channel and channel.group(1) == "analysis":
            kind = "reasoning"
        else:
            kind = "content"
        self._open_body(header, kind)

    def _open_body(self, header: str, kind: str) -> None:
        self._in_body, self._kind, self._header, self._scan_from = True, kind, header, 0

    def _step_body(self, out: list[Event]) -> bool:
        buf = self._buf
        i, marker = find_first(buf, BODY_STOPS, self._scan_from)
        if self._kind != "tool":
            end = i if i >= 0 else len(buf) - partial_len(buf, BODY_STOPS)
            out += emit(self._kind, buf[:end])
            if i < 0:
                self._buf = buf[end:]
                return False
        elif i < 0:
            self._scan_from = max(0, len(buf) - max(map(len, BODY_STOPS)) + 1)
            return False
        else:
            out += self._close_call(buf[:i], marker if marker in ENDS else "")
        self._buf = buf[i + (len(marker) if marker in ENDS else 0) :]
        self._in_body = False
        return True

    def _close_call(self, body: str, end: str) -> list[Event]:
        """A tool message ended: a call when its body is a JSON object, else its raw text."""
        try:
            args = loads_json(body.strip())
        except ValueError:
            args = None
        if isinstance(args, dict) and self._name:
            return call_events(self.tool_calls, self._name, args)
        return emit("content", self._header + MESSAGE + body + end)


class Harmony(ToolFamily):
    name = "harmony"
    markers = (START, CHANNEL, MESSAGE, CONSTRAIN, *ENDS)
    grammar_tokens = ("<|call|>",)
    parallel = False  # <|call|> ends the turn: one call per message

    def output_parser(self, *, starts_in_reasoning: bool, tools_enabled: bool) -> OutputParser:
        return HarmonyParser(starts_in_reasoning=starts_in_reasoning, tools_enabled=tools_enabled)

    def forced_opening(self, name: str | None) -> str:
        opening = CHANNEL + "commentary to=functions."
        return f"{opening}{name} {CONSTRAIN}json{MESSAGE}" if name else opening

    def grammar(self, spec: CallSpec, chat_template: str) -> str:
        """``NAME <|constrain|>json<|message|>{...}<|call|>`` (a named tool's header is forced)."""
        m = spec.mark
        g = Lark(spec, ())
        fns = []
        for f in spec.functions:
            header = (
                []
                if spec.header_forced
                else [f"{lit(f['name'] + ' ')} {m(CONSTRAIN)} {lit('json')} {m(MESSAGE)}"]
            )
            fns.append(" ".join([*header, g.json(bounded(f, spec.chars(f)))]))
        return g.calls(fns, "", m("<|call|>"), "")
