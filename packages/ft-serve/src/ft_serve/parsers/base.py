"""Events, the ``OutputParser`` interface, and the marker scanning every parser shares.

A parser turns the text deltas of one generated response into ``Event``s. Text that could be
the beginning of a marker (``"<tool_ca"``) is held back until the following characters show
whether it is one, so a marker is never emitted as content, whatever the chunking.
"""

from __future__ import annotations

import json
import math
import secrets
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

EVENT_KINDS = ("reasoning", "content", "tool_call", "tool_args")


@dataclass(frozen=True)
class Event:
    """One piece of a parsed response.

    kind: "reasoning" | "content" (``text`` is a delta), "tool_call" (a call opens: ``index``,
    ``name``, ``id``; always before its args), "tool_args" (``text`` is a delta of the arguments
    JSON of call ``index``; the deltas of one index concatenate to its final arguments).
    """

    kind: str
    text: str = ""
    index: int = 0
    name: str = ""
    id: str = ""


class OutputParser(ABC):
    """Parses one response. Feed every text delta in order, then call ``finish`` once.

    ``tool_calls`` lists the complete calls so far as ``{"id", "name", "arguments"}`` dicts
    (``arguments``: JSON text of an object), in order; it is final after ``finish``.
    """

    def __init__(self) -> None:
        self.tool_calls: list[dict] = []

    @abstractmethod
    def feed(self, delta: str) -> list[Event]:
        """Consume a text delta (mutates the parser); return the events it completes."""

    @abstractmethod
    def finish(self) -> list[Event]:
        """End of generation: flush held-back text; an unfinished tool call comes back as content."""


class Stage(ABC):
    """One step of a staged parser: text in, events out (buffers internally)."""

    @abstractmethod
    def feed(self, text: str) -> list[Event]: ...

    @abstractmethod
    def finish(self) -> list[Event]: ...


class PassStage(Stage):
    """Everything is content."""

    def feed(self, text: str) -> list[Event]:
        return emit("content", text)

    def finish(self) -> list[Event]:
        return []


def emit(kind: str, text: str) -> list[Event]:
    """``[Event(kind, text)]``, or nothing for empty text."""
    return [Event(kind, text)] if text else []


def find_first(buf: str, markers: Sequence[str], start: int = 0) -> tuple[int, str]:
    """Earliest complete marker in ``buf[start:]`` as (position, marker); (-1, "") if none."""
    best, found = -1, ""
    for m in markers:
        i = buf.find(m, start)
        if i >= 0 and (best < 0 or i < best or (i == best and len(m) > len(found))):
            best, found = i, m
    return best, found


def partial_len(buf: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of ``buf`` that is a proper prefix of a marker (to hold back)."""
    longest = min(len(buf), max(len(m) for m in markers) - 1)
    for k in range(longest, 0, -1):
        tail = buf[-k:]
        if any(m.startswith(tail) for m in markers):
            return k
    return 0


def new_call_id() -> str:
    """A fresh tool call id: ``call_`` + 24 hex chars."""
    return "call_" + secrets.token_hex(12)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text}")
    return value


def _no_constants(text: str) -> Any:
    raise ValueError(f"not JSON: {text}")


def loads_json(text: str) -> Any:
    """Strict ``json.loads``: NaN, Infinity and overflowing numbers raise ValueError."""
    return json.loads(text, parse_float=_finite, parse_constant=_no_constants)


def json_value(text: str) -> Any:
    """A parameter value written as text: the JSON value when it parses as JSON, else the string."""
    try:
        return loads_json(text)
    except ValueError:
        return text


def call_events(calls: list[dict], name: str, arguments: dict) -> list[Event]:
    """Record a complete call in ``calls`` (mutates it); return its tool_call + tool_args events."""
    args = json.dumps(arguments, ensure_ascii=False)
    index, call_id = len(calls), new_call_id()
    calls.append({"id": call_id, "name": name, "arguments": args})
    return [
        Event("tool_call", index=index, name=name, id=call_id),
        Event("tool_args", text=args, index=index),
    ]
