"""Server-sent events and request plumbing shared by the adapters."""

from __future__ import annotations

import asyncio
import json

from starlette.requests import Request
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
    return StreamingResponse(chunks, media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


async def json_body(request: Request) -> dict:
    raw = await request.body()
    if not raw:
        raise bad_request("the request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


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
