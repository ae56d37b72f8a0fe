"""``collect``: merge a response's events into whole reasoning, content and tool calls."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .base import Event


@dataclass(frozen=True)
class Collected:
    """A whole response. tool_calls: ``{"id", "name", "arguments"}`` dicts in index order."""

    reasoning: str
    content: str
    tool_calls: tuple[dict, ...]


def collect(events: Iterable[Event]) -> Collected:
    """Concatenate deltas by kind and arguments by call index.

    Raises ValueError when a ``tool_args`` event comes before its call's ``tool_call``, or a
    call index repeats.
    """
    text = {"reasoning": [], "content": []}
    calls: dict[int, dict] = {}
    for ev in events:
        if ev.kind in text:
            text[ev.kind].append(ev.text)
        elif ev.kind == "tool_call":
            if ev.index in calls:
                raise ValueError(f"tool call {ev.index} opened twice")
            calls[ev.index] = {"id": ev.id, "name": ev.name, "arguments": ""}
        elif ev.kind == "tool_args":
            if ev.index not in calls:
                raise ValueError(f"arguments for tool call {ev.index} before its tool_call event")
            calls[ev.index]["arguments"] += ev.text
        else:
            raise ValueError(f"unknown event kind {ev.kind!r}")
    return Collected(
        "".join(text["reasoning"]), "".join(text["content"]), tuple(calls[i] for i in sorted(calls))
    )
