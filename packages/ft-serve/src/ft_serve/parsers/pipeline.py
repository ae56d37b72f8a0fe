"""``StagedParser``: a reasoning stage, whose content then goes through a tool-call stage."""

from __future__ import annotations

from .base import Event, OutputParser, PassStage, Stage
from .params import Strings
from .tool_calls import ToolCallStage, ToolFormat


class StagedParser(OutputParser):
    """reasoning: the reasoning stage (``ThinkStage`` or ``PassStage``); tool_format: None for
    no tool parsing (all content stays content); strings: the tools' string parameters."""

    def __init__(
        self, reasoning: Stage, tool_format: ToolFormat | None, strings: Strings = None
    ) -> None:
        super().__init__()
        self._reasoning = reasoning
        self._tools: Stage = (
            ToolCallStage(tool_format, self.tool_calls, strings) if tool_format else PassStage()
        )

    def feed(self, delta: str) -> list[Event]:
        return self._route(self._reasoning.feed(delta))

    def finish(self) -> list[Event]:
        return self._route(self._reasoning.finish()) + self._tools.finish()

    def _route(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            if ev.kind == "content":
                out += self._tools.feed(ev.text)
            else:
                out.append(ev)
        return out
