"""The ``think`` reasoning stage: ``<think>REASONING</think>CONTENT``.

Reasoning whitespace is stripped at its two ends only; the newlines templates put right after
``</think>`` are dropped from the start of content. An output that never closes ``</think>``
is all reasoning. Content is passed on as soon as it arrives (no markers are looked for in it).
"""

from __future__ import annotations

from .base import Event, Stage, emit, find_first, partial_len

OPEN, CLOSE = "<think>", "</think>"


class ThinkStage(Stage):
    """Splits reasoning from content.

    starts_in_reasoning: the prompt already ended in ``<think>``, so output begins inside
    reasoning (a repeated ``<think>`` at its start is dropped). Otherwise a ``<think>`` is
    recognised only at the very start of the output (after whitespace).
    """

    def __init__(self, starts_in_reasoning: bool = False) -> None:
        self._mode = "reasoning" if starts_in_reasoning else "start"
        self._buf = ""
        self._at_start = True  # reasoning: nothing emitted yet (strip leading whitespace)
        self._strip_nl = False  # content: still dropping the newlines after </think>

    def feed(self, text: str) -> list[Event]:
        self._buf += text
        out: list[Event] = []
        while self._buf and self._step(out):
            pass
        return out

    def finish(self) -> list[Event]:
        buf, self._buf = self._buf, ""
        if self._mode == "reasoning":
            return emit("reasoning", buf.strip() if self._at_start else buf.rstrip())
        if self._mode == "content" and self._strip_nl:
            buf = buf.lstrip("\n")
        return emit("content", buf)

    def _step(self, out: list[Event]) -> bool:
        """Advance on the buffer; True when the mode changed and there may be more to do."""
        if self._mode == "start":
            return self._start()
        if self._mode == "reasoning":
            return self._reasoning(out)
        if self._strip_nl:
            self._buf = self._buf.lstrip("\n")
            self._strip_nl = not self._buf
        out += emit("content", self._buf)
        self._buf = ""
        return False

    def _start(self) -> bool:
        rest = self._buf.lstrip()
        if rest.startswith(OPEN):
            self._buf, self._mode = rest[len(OPEN) :], "reasoning"
            return True
        if OPEN.startswith(rest):  # only whitespace, or a partial "<think>" so far
            return False
        self._mode = "content"
        return True

    def _reasoning(self, out: list[Event]) -> bool:
        if self._at_start:
            self._buf = self._buf.lstrip()
            if self._buf.startswith(OPEN):
                self._buf = self._buf[len(OPEN) :].lstrip()
            elif OPEN.startswith(self._buf):
                return False
        i, _ = find_first(self._buf, (CLOSE,))
        if i >= 0:
            self._reason(out, self._buf[:i].rstrip())
            self._buf = self._buf[i + len(CLOSE) :]
            self._mode, self._strip_nl = "content", True
            return True
        safe = self._buf[: len(self._buf) - partial_len(self._buf, (CLOSE,))]
        text = safe.rstrip()  # trailing whitespace waits: it may precede </think>
        self._reason(out, text)
        self._buf = self._buf[len(text) :]
        return False

    def _reason(self, out: list[Event], text: str) -> None:
        if text:
            out.append(Event("reasoning", text))
            self._at_start = False
