"""Server-sent events and request plumbing shared by the adapters."""

from __future__ import annotations

import asyncio
import json

from starlette.requests import ClientDisconnect, Request
from starlette.responses import StreamingResponse

from ft_serve.server.errors import ApiError, bad_request


def sse_data(obj) -> str:
    """One OpenAI-style event: ``data: {json}``."""
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def sse_event(name: str, obj) -> str:
    """One named event (Anthropic Messages, OpenAI Responses): ``event: NAME`` + ``data: {json}``."""
    return f"event: {name}\ndata: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def stream(chunks) -> StreamingResponse:
    """An SSE response over an async iterator of already formatted events. When the client goes
    away Starlette cancels the iterator; the Generation inside aborts its request and frees its pages."""
    return StreamingResponse(
        chunks,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


MAX_DEPTH = 128  # JSON nesting levels a request body may have (deeper: 400, never RecursionError)
_THREAD_PARSE = 1 << 16  # bodies longer than this (bytes) are parsed in a worker thread
_DISCARD = 64 << 20  # bytes of an oversized body read and dropped before the 413 (then: cut off)


async def json_body(request: Request, max_size: int = 32 << 20) -> dict:
    """The request's JSON object. 413 over ``max_size`` bytes (Content-Length, or counted while
    reading, before any parsing); 400 for empty or invalid JSON, nesting deeper than ``MAX_DEPTH``
    or a lone UTF-16 surrogate in any string (the message names the field)."""
    raw = await read_body(request, max_size)
    if not raw:
        raise bad_request("the request body is empty; send a JSON object")
    if len(raw) > _THREAD_PARSE:
        return await asyncio.to_thread(parse_body, raw)
    return parse_body(raw)


async def read_body(request: Request, max_size: int) -> bytes:
    """The body's bytes; an ApiError 413 once it is known to exceed ``max_size``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_size:
        await _discard(request, int(declared))
        raise _too_large(int(declared), max_size)
    chunks, n = [], 0
    try:
        async for chunk in request.stream():
            n += len(chunk)
            if n > max_size:
                await _discard(request, _DISCARD)
                raise _too_large(None, max_size)
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(499, "client closed the request") from None
    return b"".join(chunks)


def _too_large(n: int | None, limit: int) -> ApiError:
    size = f"{n} bytes" if n is not None else f"over {limit} bytes"
    return ApiError(
        413,
        f"the request body is too large ({size}); this server takes at most "
        f"{limit} bytes (--max-body-size)",
        code="request_too_large",
    )


async def _discard(request: Request, budget: int) -> None:
    """Read and drop up to ``budget`` more bytes of the body, so that the client, still sending,
    reads the 413 instead of a reset connection. Larger bodies are cut off."""
    if budget > _DISCARD:
        return
    try:
        async for chunk in request.stream():
            budget -= len(chunk)
            if budget < 0:
                return
    except Exception:  # noqa: BLE001 - the client went away or the stream was consumed
        return


def parse_body(raw: bytes) -> dict:
    """``raw`` as a JSON object, checked by ``check_json`` (400s naming the limit or field)."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise bad_request(f"the request body nests JSON deeper than {MAX_DEPTH} levels") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    check_json(body)
    return body


def check_json(value) -> None:
    """One iterative walk: raise a 400 for nesting deeper than ``MAX_DEPTH`` or a string (value or
    key) holding a lone surrogate, which no tokenizer can encode (its path is found afterwards)."""
    stack, bad = [(value, 1)], False
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise bad_request(f"the request body nests JSON deeper than {MAX_DEPTH} levels")
        for k, x in v.items() if isinstance(v, dict) else enumerate(v):
            if type(x) is str:
                bad = bad or not _valid(x)
            elif isinstance(x, (dict, list)):
                stack.append((x, depth + 1))
            bad = bad or (type(k) is str and not _valid(k))
    if bad:
        path = _surrogate_path(value)
        raise bad_request(
            f"'{path}' holds a lone UTF-16 surrogate (such as \\ud800); text must be valid Unicode",
            path,
        )


def _valid(s: str) -> bool:
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate_path(value, path: str = "") -> str | None:
    """The dotted path (``messages[0].content``) of the first string with a lone surrogate."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for k, x in items:
        sub = f"{path}[{k}]" if isinstance(value, list) else (f"{path}.{k}" if path else str(k))
        if (type(k) is str and not _valid(k)) or (type(x) is str and not _valid(x)):
            return sub.encode("utf-8", "backslashreplace").decode()
        if isinstance(x, (dict, list)) and (found := _surrogate_path(x, sub)) is not None:
            return found
    return None


async def run_to_end(gen, request: Request) -> list:
    """Consume a Generation for a non-streaming response; a client that disconnects cancels it."""
    events: list = []

    async def consume():
        async for ev in gen:
            events.append(ev)

    task = asyncio.create_task(consume())
    while not task.done():
        done, _ = await asyncio.wait({task}, timeout=0.25)
        if not done and await _disconnected(request):
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            raise ApiError(499, "client closed the request")
    task.result()
    return events


async def _disconnected(request: Request) -> bool:
    try:
        return await asyncio.wait_for(request.is_disconnected(), 0.01)
    except asyncio.TimeoutError:
        return False
