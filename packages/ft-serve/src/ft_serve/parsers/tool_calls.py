"""The tool-call stage: finds ``open ... close`` blocks in content and turns them into calls.

A block is buffered until it closes, then parsed by its ``ToolFormat``; a good one becomes a
``tool_call`` event and one ``tool_args`` event, a malformed or unterminated one comes back as
content, raw text and markers included. Whitespace before, between or after calls is dropped
unless more content follows; section markers (DeepSeek's ``<｜tool▁calls▁begin｜>``) are dropped only
when a call in them works.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .base import Event, Stage, call_events, emit, find_first, partial_len
from .params import Strings

_NAME = re.compile(r"[^\s<>{}\"']+")


@dataclass(frozen=True)
class ToolFormat:
    """The hook a tool-call family gives the stage: ``open``/``close`` delimit one call; ``parse``
    reads the body between them, ``parse(body, strings) -> (name, arguments dict)`` or None when
    malformed; ``section`` markers (outside calls) are dropped once a call in them works."""

    open: str
    close: str
    parse: Callable[[str, Strings], tuple[str, dict] | None]
    section: tuple[str, ...] = ()


def checked_call(name: str, args: object) -> tuple[str, dict] | None:
    """``(name, args)`` when ``name`` (stripped) is a plain token and ``args`` a dict; else None."""
    name = name.strip()
    if not _NAME.fullmatch(name) or not isinstance(args, dict):
        return None
    return name, args


class ToolCallStage(Stage):
    """Content text in; content and tool events out. Appends complete calls to ``calls``; ``strings``:
    the tools' string parameters (``params.string_params``), for the text-valued formats."""

    def __init__(self, fmt: ToolFormat, calls: list[dict], strings: Strings = None) -> None:
        self._fmt, self._calls, self._strings = fmt, calls, strings
        self._outside_markers = (fmt.open, *fmt.section)
        self._buf = ""
        self._inside = False
        self._scan_from = 0  # inside: where the search for the close marker resumes
        self._prefix = ""  # inside: raw text before the body (given back if the call fails)
        self._pending = ""  # outside: whitespace / section markers whose fate is not known yet
        self._after_call = False  # outside: the last thing was a complete call
        self._fresh = True  # nothing emitted yet: leading whitespace waits too

    def feed(self, text: str) -> list[Event]:
        self._buf += text
        out: list[Event] = []
        while self._step_inside(out) if self._inside else self._step_outside(out):
            pass
        return out

    def finish(self) -> list[Event]:
        out: list[Event] = []
        if self._inside:
            out += emit("content", self._prefix + self._buf)
        else:
            self._text(out, self._buf)
            if not self._after_call:
                out += emit("content", self._pending)
        self._buf = self._pending = self._prefix = ""
        self._inside = False
        return out

    def _step_outside(self, out: list[Event]) -> bool:
        i, marker = find_first(self._buf, self._outside_markers)
        end = i if i >= 0 else len(self._buf) - partial_len(self._buf, self._outside_markers)
        self._text(out, self._buf[:end])
        if i < 0:
            self._buf = self._buf[end:]
            return False
        self._buf = self._buf[i + len(marker) :]
        if marker == self._fmt.open:
            self._inside, self._scan_from = True, 0
            self._prefix, self._pending = self._pending + marker, ""
        elif not self._after_call:
            self._pending += marker
        return True

    def _step_inside(self, out: list[Event]) -> bool:
        close = self._fmt.close
        i = self._buf.find(close, self._scan_from)
        if i < 0:
            self._scan_from = max(0, len(self._buf) - len(close) + 1)
            return False
        body, self._buf, self._inside = self._buf[:i], self._buf[i + len(close) :], False
        nested = body.rfind(self._fmt.open)
        if nested >= 0:  # an earlier open never closed: that part is content
            out += emit("content", self._prefix + body[:nested])
            self._prefix, body = self._fmt.open, body[nested + len(self._fmt.open) :]
        parsed = self._fmt.parse(body, self._strings)
        if parsed is None:
            out += emit("content", self._prefix + body + close)
        else:
            out += call_events(self._calls, *parsed)
        self._after_call, self._prefix, self._fresh = parsed is not None, "", False
        return True

    def _text(self, out: list[Event], text: str) -> None:
        """Plain text outside calls; whitespace at the start, after a call or after a section
        marker waits (it is dropped if a call follows, or at the end after a call)."""
        if not text:
            return
        if (self._after_call or self._pending or self._fresh) and not text.strip():
            self._pending += text
            return
        out += emit("content", self._pending + text)
        self._pending, self._after_call, self._fresh = "", False, False
