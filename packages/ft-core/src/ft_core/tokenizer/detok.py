"""Incremental detokenization and stop strings: the one mechanism the engine (``StopScanner``: its
stop-string check) and the server's streams (ft_serve's ``Generation``) both use.

Byte-level BPE tokens can end inside a UTF-8 character, and a token's text can depend on its
left neighbour, so each step decodes a short window [prefix, read) of ids and emits only the
text that became final. ``StopStrings`` holds back text that could still grow into a stop string
and cuts the stream where one completes.
"""

from __future__ import annotations


class IncrementalDetokenizer:
    """Feed token ids as they arrive; get the new text. ``decode(ids) -> str`` is the tokenizer's
    (special tokens kept, so reasoning and tool markers reach the parsers)."""

    def __init__(self, decode, window: int = 6):
        self._decode = decode
        self.ids: list[int] = []
        self._prefix = 0  # start of the context window
        self._read = 0  # ids up to here have been emitted as text
        self._window = window

    def push(self, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        full = self._decode(self.ids[self._prefix :])
        if full.endswith("\ufffd") or len(full) < len(prefix_text):  # an incomplete character: wait
            return ""
        out = full[len(prefix_text) :]
        self._read = len(self.ids)
        self._prefix = max(0, self._read - self._window)
        if self._prefix and self._decode(self.ids[self._prefix : self._read]).startswith("\ufffd"):
            self._prefix = max(
                0, self._prefix - self._window
            )  # never start the window mid-character
        return out

    def flush(self) -> str:
        """Text still held back at the end (an incomplete character decodes as U+FFFD)."""
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        out = self._decode(self.ids[self._prefix :])[len(prefix_text) :]
        self._read = len(self.ids)
        return out


class StopStrings:
    """Cut a text stream at the first stop string. ``push`` returns text safe to emit; ``matched`` is
    the stop string once one completed (the text before it was emitted, it and anything after are not)."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self._hold = max((len(s) for s in self.stops), default=1) - 1
        self._buf = ""
        self.matched: str | None = None

    def push(self, text: str) -> str:
        if self.matched is not None:
            return ""
        if not self.stops:
            return text
        self._buf += text
        hits = [(i, s) for s in self.stops if (i := self._buf.find(s)) >= 0]
        if hits:
            i, self.matched = min(hits)
            out, self._buf = self._buf[:i], ""
            return out
        # Hold back only the longest tail that is still the start of some stop string.
        keep = next(
            (
                k
                for k in range(min(self._hold, len(self._buf)), 0, -1)
                if any(s.startswith(self._buf[-k:]) for s in self.stops)
            ),
            0,
        )
        out, self._buf = (self._buf[:-keep], self._buf[-keep:]) if keep else (self._buf, "")
        return out

    def flush(self) -> str:
        out, self._buf = ("" if self.matched is not None else self._buf), ""
        return out


class StopScanner:
    """A sequence's stop strings, checked as tokens arrive (O(new text) a step, not a decode of the whole
    output): ``push(tok)`` is True once a stop string completed; ``text()`` is the completion, cut before it."""

    def __init__(self, decode, stops: tuple[str, ...]):
        self._detok = IncrementalDetokenizer(decode)
        self._stops = StopStrings(stops)
        self._text = ""

    def push(self, tok: int) -> bool:
        self._text += self._stops.push(self._detok.push([tok]))
        return self._stops.matched is not None

    def text(self) -> str:
        """The completion so far, held-back text included (call once the sequence finished)."""
        if self._stops.matched is None:
            self._text += self._stops.push(self._detok.flush())
            if self._stops.matched is None:
                self._text += self._stops.flush()
        return self._text
