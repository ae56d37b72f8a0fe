"""Anthropic Messages output: parser events -> content blocks, as one message or as the SSE stream.

One ``BlockWriter`` serves both forms, so a streamed message and an unstreamed one are built by
the same steps. A block opens when the kind of output changes (thinking -> text -> tool_use ...)
and indexes increase; a thinking block is signed when it closes (``signature_delta`` just before
its ``content_block_stop``; the signature names the secret's key id, api/signing.py). Stream:
message_start, ping, the block events, message_delta (stop reason, cumulative usage), message_stop;
an engine failure ends it with an ``error`` event.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging

from ft_serve.api.signing import key_id
from ft_serve.api.sse import sse_event
from ft_serve.server.errors import ApiError, anthropic_body
from ft_serve.server.service import parse_arguments

log = logging.getLogger("ft.serve")

PING_EVERY = 10.0  # seconds without output (a long prefill) before a keep-alive ping
_SIG_DOMAIN = b"ft/anthropic-thinking/v1\n"


def _mac(secret: bytes, text: str) -> str:
    mac = hmac.new(secret, _SIG_DOMAIN + text.encode(errors="surrogatepass"), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def sign_thinking(secret: bytes, text: str) -> str:
    """The signature of a thinking block: ``ft2.<key id>.<base64 HMAC-SHA256 of its text>``."""
    return f"ft2.{key_id(secret)}.{_mac(secret, text)}"


def thinking_origin(secret: bytes, text: str, signature: str) -> str:
    """ "ours" (signed by this secret; also the bare-HMAC signatures of servers before key ids),
    "altered" (it names this secret's key id but does not match ``text``) or "foreign" (anything
    else: Anthropic's, another server's, a former secret's)."""
    sig = signature.encode(errors="replace")
    if signature.startswith(f"ft2.{key_id(secret)}."):
        return (
            "ours" if hmac.compare_digest(sign_thinking(secret, text).encode(), sig) else "altered"
        )
    return "ours" if hmac.compare_digest(_mac(secret, text).encode(), sig) else "foreign"


def tool_use_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


class BlockWriter:
    """Turns a response's parser events into content blocks (mutates ``blocks``) and the stream
    events that build them. ``thinking``: reasoning becomes thinking blocks (else it is dropped);
    ``one_call``: only the first tool call is kept (``disable_parallel_tool_use``)."""

    def __init__(self, secret: bytes, thinking: bool, one_call: bool):
        self.secret, self.thinking, self.one_call = secret, thinking, one_call
        self.blocks: list[dict] = []
        self._open: int | None = None  # index of the open block
        self._calls: dict[int, int] = {}  # parser call index -> block index

    def feed(self, ev) -> list[dict]:
        """The stream events (content_block_*) that ``ev`` adds."""
        if ev.kind in ("reasoning", "content"):
            if not ev.text or (ev.kind == "reasoning" and not self.thinking):
                return []
            kind, key = ("thinking", "thinking") if ev.kind == "reasoning" else ("text", "text")
            out = []
            if self._open is None or self.blocks[self._open]["type"] != kind:
                out += self._start(
                    {"type": "thinking", "thinking": "", "signature": ""}
                    if kind == "thinking"
                    else {"type": "text", "text": ""}
                )
            self.blocks[self._open][key] += ev.text
            return out + [self._delta({"type": f"{kind}_delta", key: ev.text})]
        if ev.kind == "tool_call":
            if self.one_call and self._calls:
                return []
            out = self._start(
                {"type": "tool_use", "id": tool_use_id(ev.id), "name": ev.name, "input": {}}
            )
            self._calls[ev.index] = self._open
            return out
        if (
            ev.kind == "tool_args"
            and ev.text
            and self._open is not None
            and self._calls.get(ev.index) == self._open
        ):
            return [self._delta({"type": "input_json_delta", "partial_json": ev.text})]
        return []

    def close(self) -> list[dict]:
        """The events that end the open block (call once, after the last ``feed``)."""
        return self._stop()

    def content(self, tool_calls: list[dict]) -> list[dict]:
        """The final blocks; tool_use inputs from the parser's complete ``tool_calls``."""
        for i, b in self._calls.items():
            args = parse_arguments(tool_calls[i]["arguments"]) if i < len(tool_calls) else {}
            self.blocks[b]["input"] = args if isinstance(args, dict) else {}
        return self.blocks

    @property
    def has_tool_use(self) -> bool:
        return bool(self._calls)

    def _start(self, block: dict) -> list[dict]:
        out = self._stop()
        self.blocks.append(block)
        self._open = len(self.blocks) - 1
        start = dict(block, signature="") if block["type"] == "thinking" else dict(block)
        return out + [{"type": "content_block_start", "index": self._open, "content_block": start}]

    def _delta(self, delta: dict) -> dict:
        return {"type": "content_block_delta", "index": self._open, "delta": delta}

    def _stop(self) -> list[dict]:
        if self._open is None:
            return []
        i, b, out = self._open, self.blocks[self._open], []
        if b["type"] == "thinking":
            b["signature"] = sign_thinking(self.secret, b["thinking"])
            out.append(self._delta({"type": "signature_delta", "signature": b["signature"]}))
        self._open = None
        return out + [{"type": "content_block_stop", "index": i}]


def stop_reason(gen, writer: BlockWriter) -> str:
    if writer.has_tool_use:
        return "tool_use"
    if gen.stop_sequence is not None:
        return "stop_sequence"
    return "max_tokens" if gen.finish_reason == "length" else "end_turn"


def usage_of(gen) -> dict:
    """Anthropic counts input tokens read from the prefix cache apart from ``input_tokens``."""
    cached = min(gen.cached_tokens, gen.prompt_tokens)
    return {
        "input_tokens": gen.prompt_tokens - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": gen.completion_tokens,
    }


def message_body(mid: str, model: str, content: list[dict], gen, writer: BlockWriter) -> dict:
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(gen, writer),
        "stop_sequence": gen.stop_sequence,
        "usage": usage_of(gen),
    }


async def stream_message(
    gen, writer: BlockWriter, mid: str, model: str, ping_every: float = PING_EVERY
):
    """The SSE events of one streamed message."""
    start = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": gen.prompt_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
        },
    }
    yield sse_event("message_start", {"type": "message_start", "message": start})
    yield sse_event("ping", {"type": "ping"})
    try:
        async for ev in paced(gen, ping_every):
            for e in [{"type": "ping"}] if ev is None else writer.feed(ev):
                yield sse_event(e["type"], e)
        if gen.finish_reason == "error":
            err = ApiError(gen.error_status, gen.error or "generation failed")
            yield sse_event("error", anthropic_body(err))
            return
        for e in writer.close():
            yield sse_event(e["type"], e)
    except Exception:  # a bug: the client gets an error event instead of a cut connection
        log.exception("unhandled error while streaming %s", mid)
        yield sse_event(
            "error", anthropic_body(ApiError(500, "internal server error (see the server log)"))
        )
        return
    delta = {"stop_reason": stop_reason(gen, writer), "stop_sequence": gen.stop_sequence}
    yield sse_event(
        "message_delta", {"type": "message_delta", "delta": delta, "usage": usage_of(gen)}
    )
    yield sse_event("message_stop", {"type": "message_stop"})


async def paced(source, every: float):
    """The items of the async iterable ``source``, with a ``None`` after every ``every`` seconds
    without one (time for a keep-alive). Closing or cancelling this closes ``source``."""
    it = source.__aiter__()
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(it.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=every)
            if not done:
                yield None
                continue
            fut, pending = pending, None
            try:
                item = fut.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if (
            pending is not None
        ):  # the source is mid-step: cancelling the step ends it (its finally runs)
            pending.add_done_callback(lambda f: f.cancelled() or f.exception())
            pending.cancel()
        elif hasattr(it, "aclose"):
            await it.aclose()
