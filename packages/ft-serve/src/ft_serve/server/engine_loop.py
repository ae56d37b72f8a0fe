"""EngineLoop: the one thread that owns the Engine. Requests are handed over through a command
queue and join the running batch between steps (continuous batching); every step's new tokens go
back to each request's asyncio queue on the server's event loop.

Thread model: only the loop thread touches the Engine; the HTTP side calls ``submit`` / ``abort`` /
``call`` / ``fail_all`` (thread-safe) and awaits ``Request.updates``.

Robustness: an exception while admitting, stepping, sending or aborting one request fails that
request (an error Update) and the loop goes on. Should the thread end anyway (a BaseException, or
``stop``), every request it still holds gets an error Update, later submits get a 503, and
``health()`` says "dead"; a loop that has work but has not ticked for ``stall_seconds`` is "wedged".
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque

from ft_core import Engine, SamplingParams
from ft_core.errors import FTError, NonFiniteError

from ft_serve.server.errors import ApiError
from ft_serve.server.handoff import Request, Update, post, settle

log = logging.getLogger("ft.serve")

INTERNAL = "internal error in the engine (see the server log)"
SHUTTING_DOWN = "the server is shutting down"


class EngineLoop:
    def __init__(
        self,
        engine: Engine,
        max_running: int = 16,
        max_waiting: int = 256,
        stall_seconds: float = 300.0,
    ):
        self.engine = engine
        self.max_running, self.max_waiting = max_running, max_waiting
        self.stall_seconds = stall_seconds  # health(): "wedged" after this long without a tick
        self._cmds: queue.SimpleQueue = queue.SimpleQueue()
        self._queued = (
            0  # "add" commands not yet drained (aborts and calls do not count as waiting)
        )
        self._queued_lock = threading.Lock()  # also orders submits against closing
        self._closed: str | None = None  # why no more requests are taken (set once, under the lock)
        self._pending: deque[Request] = (
            deque()
        )  # accepted, not yet in the engine (over max_running)
        self._active: dict[int, Request] = {}  # seq_id -> request inside the engine
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ft-engine", daemon=True)
        self.snapshot: dict = {}  # expert / prefix counters, refreshed by the loop thread
        self.steps = 0
        self.beat = time.monotonic()  # the loop thread's last tick (monotonic seconds)
        self.died: str | None = None  # what ended the thread, when it ended on an exception
        self._snapshot_failed = False

    # ---- called from the HTTP side --------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, prompt_ids: list[int], params: SamplingParams, constraint=None) -> Request:
        if self.waiting >= self.max_waiting:
            raise ApiError(
                503,
                f"server busy: {self.waiting} requests waiting "
                f"(limit {self.max_waiting}); retry later",
            )
        req = Request(prompt_ids, params, asyncio.get_running_loop(), constraint=constraint)
        with self._queued_lock:
            if self._closed is not None:
                raise ApiError(503, self._closed)
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
        with self._queued_lock:
            if self._closed is not None:
                fut.set_exception(ApiError(503, self._closed))
            else:
                self._cmds.put(("call", (fn, fut, loop)))
        return fut

    def fail_all(self, message: str = SHUTTING_DOWN, status: int = 503) -> None:
        """End every request (running or waiting) with an error Update of ``message`` and refuse
        new ones: the drain deadline of a shutdown. Thread-safe; the loop thread does it between
        steps."""
        with self._queued_lock:
            if self._closed is None:
                self._closed = message
        self._cmds.put(("fail", (message, status)))

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._cmds.put(("wake", None))
        self._thread.join(timeout)

    def health(self) -> dict:
        """{"status": "ok" | "dead" | "wedged", running, waiting, last_tick_seconds_ago}."""
        ago = time.monotonic() - self.beat
        busy = bool(self._active or self.waiting)
        if not self._thread.is_alive():
            status = "dead"
        elif busy and ago > self.stall_seconds:
            status = "wedged"
        else:
            status = "ok"
        out = {
            "status": status,
            "running": self.running,
            "waiting": self.waiting,
            "last_tick_seconds_ago": round(ago, 3),
        }
        if status == "dead":
            out["reason"] = self.died or "the engine thread has stopped"
        elif status == "wedged":
            out["reason"] = (
                f"the engine has work and has not ticked for {ago:.0f} s "
                f"(limit {self.stall_seconds:g} s)"
            )
        return out

    @property
    def running(self) -> int:
        return len(self._active)

    @property
    def waiting(self) -> int:
        return len(self._pending) + self._queued

    # ---- the loop thread --------------------------------------------------------------------
    def _run(self) -> None:
        reason = SHUTTING_DOWN
        try:
            while not self._stop.is_set():
                self.beat = time.monotonic()
                self._tick()
        except BaseException as e:  # noqa: BLE001 - whatever ends the thread, nobody may hang
            self.died = f"the engine thread stopped on {type(e).__name__}"
            reason = f"{self.died} (see the server log)"
            log.critical("the engine thread stopped; every request now fails", exc_info=True)
        finally:
            self._close(reason, 503 if self.died is None else 500)

    def _tick(self) -> None:
        """One iteration: take commands, admit, step, hand the new tokens over."""
        self._drain(block=not self._active and not self._pending)
        self._admit()
        if not self._active:
            return
        try:
            advanced = self.engine.step()
        except NonFiniteError as e:  # the engine finished those sequences and logged where
            advanced = self._fail_non_finite(e)
        except Exception as e:  # a bug must not kill the server: fail the batch, keep serving
            log.exception("engine step failed")
            for req in list(self._active.values()):
                self._finish(req, "error", f"internal error in the engine step: {type(e).__name__}")
            return
        self.steps += 1
        for seq in advanced:
            req = self._active.get(seq.seq_id)
            if req is not None:
                self._send(req)
        if self.steps % 8 == 1:
            self._refresh_snapshot()

    def _fail_non_finite(self, e: NonFiniteError) -> list:
        """Fail the requests whose logits were NaN/inf (500 with the engine's message); the step's
        other sequences advanced: returns them."""
        for sid in e.seq_ids:
            req = self._active.pop(sid, None)
            if req is not None:
                post(req, Update([], "error", error=str(e)))
        return e.advanced

    def _drain(self, block: bool) -> None:
        try:
            cmd = self._cmds.get(timeout=0.5) if block else self._cmds.get_nowait()
        except queue.Empty:
            return
        while True:
            self._command(*cmd)
            try:
                cmd = self._cmds.get_nowait()
            except queue.Empty:
                return

    def _command(self, kind: str, arg) -> None:
        if kind == "add":
            self._pending.append(arg)
            with self._queued_lock:
                self._queued -= 1
        elif kind == "abort":
            self._abort(arg)
        elif kind == "call":
            self._call(*arg)
        elif kind == "fail":
            self._fail_held(*arg)

    def _admit(self) -> None:
        while self._pending and len(self._active) < self.max_running:
            req = self._pending.popleft()
            if req.cancelled:
                continue
            try:
                req.seq = self.engine.add_request(req.prompt_ids, req.params, req.constraint)
            except FTError as e:  # the engine refused the request: bad input
                post(req, Update([], "error", error=str(e), error_status=400))
                continue
            except Exception:  # a bug on this request only: fail it, keep serving the others
                log.exception("the engine could not admit a request")
                post(req, Update([], "error", error=INTERNAL))
                continue
            self._active[req.seq.seq_id] = req

    def _call(self, fn, fut, loop) -> None:
        try:
            res, err = fn(self.engine), None
        except Exception as e:  # handed to the awaiting side
            res, err = None, e
        self._refresh_snapshot()
        settle(fut, loop, res, err)

    def _abort(self, req: Request) -> None:
        if req in self._pending:
            self._pending.remove(req)
        if req.seq is not None and self._active.pop(req.seq.seq_id, None) is not None:
            try:
                self.engine.abort(req.seq)
            except Exception:  # its pages may leak; the loop and the other requests go on
                log.exception("the engine could not abort a request")
        post(req, Update([], "abort"))

    def _send(self, req: Request) -> None:
        try:
            seq = req.seq
            new = seq.output_ids[req.sent :]
            if not new and not seq.finished:
                return  # a prefill chunk that did not finish the prompt
            req.sent = len(seq.output_ids)
            u = Update(list(new), seq.finish_reason, seq.cached_tokens)
        except Exception:
            log.exception("cannot hand a step's tokens over")
            self._finish(req, "error", INTERNAL)
            return
        if seq.finished:
            del self._active[seq.seq_id]
            self._refresh_snapshot()
        post(req, u)

    def _finish(
        self, req: Request, reason: str, error: str | None = None, status: int = 500
    ) -> None:
        self._active.pop(req.seq.seq_id, None)
        try:
            self.engine.abort(req.seq)
        except Exception:  # noqa: BLE001 - the engine may be in any state after a failed step
            log.exception("abort after a failed step")
        post(req, Update([], reason, error=error, error_status=status))

    def _fail_held(self, message: str, status: int) -> None:
        """End every request this thread holds (running and waiting) with an error Update."""
        for req in list(self._active.values()):
            self._finish(req, "error", message, status)
        while self._pending:
            u = Update([], "error", error=message, error_status=status)
            post(self._pending.popleft(), u)

    def _close(self, message: str, status: int) -> None:
        """The thread is ending: refuse new work, fail what is held and what is still queued."""
        with self._queued_lock:
            if self._closed is None or self.died is not None:
                self._closed = message
        try:
            self._fail_held(message, status)
        except Exception:  # noqa: BLE001
            log.exception("failing the remaining requests")
        while True:
            try:
                kind, arg = self._cmds.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                post(arg, Update([], "error", error=message, error_status=status))
            elif kind == "abort":
                post(arg, Update([], "abort"))
            elif kind == "call":
                fn, fut, loop = arg
                settle(fut, loop, err=ApiError(503, message))

    def _refresh_snapshot(self) -> None:
        try:
            mem = self.engine.memory
            snap = {
                "experts": self.engine.expert_stats(),
                "memory": mem.split(),
                "resizes": mem.count,
                "prefix": self.engine.prefix_stats(),
            }
        except Exception:  # counters only: keep the last snapshot, log the first failure
            if not self._snapshot_failed:
                log.exception("cannot refresh the engine counters (/metrics keeps the last ones)")
            self._snapshot_failed = True
            return
        self.snapshot = snap
