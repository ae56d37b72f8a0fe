"""EngineLoop: the one thread that owns the Engine. Requests are handed over through a command
queue and join the running batch between steps (continuous batching); every step's new tokens go
back to each request's asyncio queue on the server's event loop.

Thread model: only the loop thread touches the Engine; the HTTP side calls ``submit`` / ``abort``
(thread-safe) and awaits ``Request.updates``.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from ft_core import Engine, SamplingParams
from ft_core.errors import FTError

from ft_serve.server.errors import ApiError

log = logging.getLogger("ft.serve")


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


class EngineLoop:
    def __init__(self, engine: Engine, max_running: int = 16, max_waiting: int = 256):
        self.engine = engine
        self.max_running, self.max_waiting = max_running, max_waiting
        self._cmds: queue.SimpleQueue = queue.SimpleQueue()
        self._queued = 0  # "add" commands not yet drained (aborts and calls do not count as waiting)
        self._queued_lock = threading.Lock()
        self._pending: deque[Request] = deque()  # accepted, not yet in the engine (over max_running)
        self._active: dict[int, Request] = {}  # seq_id -> request inside the engine
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ft-engine", daemon=True)
        self.snapshot: dict = {}  # expert / prefix counters, refreshed by the loop thread
        self.steps = 0

    # ---- called from the HTTP side --------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, prompt_ids: list[int], params: SamplingParams, constraint=None) -> Request:
        if self.waiting >= self.max_waiting:
            raise ApiError(503, f"server busy: {self.waiting} requests waiting (limit {self.max_waiting}); retry later")
        req = Request(prompt_ids, params, asyncio.get_running_loop(), constraint=constraint)
        with self._queued_lock:
            self._queued += 1
        self._cmds.put(("add", req))
        return req

    def abort(self, req: Request) -> None:
        req.cancelled = True
        self._cmds.put(("abort", req))

    def call(self, fn) -> "asyncio.Future":
        """Run ``fn(engine)`` on the loop thread between two steps (a scheduler safe point); await the
        returned future for its result or exception. Running requests pause for it, then go on."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._cmds.put(("call", (fn, fut, loop)))
        return fut

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._cmds.put(("wake", None))
        self._thread.join(timeout)

    @property
    def running(self) -> int:
        return len(self._active)

    @property
    def waiting(self) -> int:
        return len(self._pending) + self._queued

    # ---- the loop thread --------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._drain(block=not self._active and not self._pending)
            self._admit()
            if not self._active:
                continue
            try:
                advanced = self.engine.step()
            except Exception as e:  # a bug must not kill the server: fail the batch, keep serving
                log.exception("engine step failed")
                for req in list(self._active.values()):
                    self._finish(req, "error", f"internal error in the engine step: {type(e).__name__}")
                continue
            self.steps += 1
            for seq in advanced:
                req = self._active.get(seq.seq_id)
                if req is not None:
                    self._send(req)
            if self.steps % 8 == 1:
                self._refresh_snapshot()

    def _drain(self, block: bool) -> None:
        try:
            cmd = self._cmds.get(timeout=0.5) if block else self._cmds.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, req = cmd
            if kind == "add":
                self._pending.append(req)
                with self._queued_lock:
                    self._queued -= 1
            elif kind == "abort":
                self._abort(req)
            elif kind == "call":
                self._call(*req)
            try:
                cmd = self._cmds.get_nowait()
            except queue.Empty:
                return

    def _admit(self) -> None:
        while self._pending and len(self._active) < self.max_running:
            req = self._pending.popleft()
            if req.cancelled:
                continue
            try:
                req.seq = self.engine.add_request(req.prompt_ids, req.params, req.constraint)
            except FTError as e:
                self._post(req, Update([], "error", error=str(e), error_status=400))
                continue
            self._active[req.seq.seq_id] = req

    def _call(self, fn, fut, loop) -> None:
        try:
            res, err = fn(self.engine), None
        except Exception as e:  # handed to the awaiting side
            res, err = None, e
        self._refresh_snapshot()

        def settle():
            if not fut.done():
                fut.set_exception(err) if err is not None else fut.set_result(res)

        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:
            pass

    def _abort(self, req: Request) -> None:
        if req in self._pending:
            self._pending.remove(req)
        if req.seq is not None and self._active.pop(req.seq.seq_id, None) is not None:
            self.engine.abort(req.seq)
        self._post(req, Update([], "abort"))

    def _send(self, req: Request) -> None:
        seq = req.seq
        new = seq.output_ids[req.sent :]
        if not new and not seq.finished:
            return  # a prefill chunk that did not finish the prompt
        req.sent = len(seq.output_ids)
        if seq.finished:
            del self._active[seq.seq_id]
            self._refresh_snapshot()
        self._post(req, Update(list(new), seq.finish_reason, getattr(seq, "cached_tokens", 0)))

    def _finish(self, req: Request, reason: str, error: str | None = None) -> None:
        self._active.pop(req.seq.seq_id, None)
        try:
            self.engine.abort(req.seq)
        except Exception:  # noqa: BLE001 - the engine may be in any state after a failed step
            log.exception("abort after a failed step")
        self._post(req, Update([], reason, error=error))

    @staticmethod
    def _post(req: Request, u: Update) -> None:
        try:
            req.loop.call_soon_threadsafe(req.updates.put_nowait, u)
        except RuntimeError:  # the event loop is closed (shutdown)
            pass

    def _refresh_snapshot(self) -> None:
        mem = self.engine.memory
        snap = {"experts": self.engine.expert_stats(), "memory": mem.split(), "resizes": mem.count}
        if hasattr(self.engine, "prefix_stats"):
            snap["prefix"] = self.engine.prefix_stats()
        self.snapshot = snap
