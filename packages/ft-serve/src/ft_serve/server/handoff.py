"""What passes between the HTTP side and the engine thread: a ``Request`` (its prompt, sampling
parameters and asyncio queue of ``Update``s) and the two ways the engine thread hands results back
onto the server's event loop (``post`` an Update, ``settle`` a future).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ft_core import SamplingParams


@dataclass
class Update:
    """What one step produced for one request."""

    token_ids: list[int]
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    cached_tokens: int = 0
    error: str | None = None
    error_status: int = 500  # 400 when the engine refused the request (RequestError)


@dataclass(eq=False)
class Request:
    prompt_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    updates: asyncio.Queue = field(default_factory=asyncio.Queue)
    seq: object = None  # ft_core Sequence once admitted
    sent: int = 0  # output ids already handed over
    arrived: float = field(default_factory=time.perf_counter)
    cancelled: bool = False
    constraint: object = None  # a TokenConstraint (structured output) or None


def post(req: Request, u: Update) -> None:
    """Queue ``u`` on ``req``'s event loop (thread-safe); dropped when that loop is closed."""
    try:
        req.loop.call_soon_threadsafe(req.updates.put_nowait, u)
    except RuntimeError:  # the event loop is closed (shutdown)
        pass


def settle(fut, loop, res=None, err: BaseException | None = None) -> None:
    """Complete ``fut`` (of the event loop ``loop``) from the loop thread."""

    def done():
        if not fut.done():
            fut.set_exception(err) if err is not None else fut.set_result(res)

    try:
        loop.call_soon_threadsafe(done)
    except RuntimeError:  # the event loop is closed (shutdown)
        pass
