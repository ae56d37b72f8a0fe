"""Run the server with uvicorn: one ready line with the URL; SIGINT/SIGTERM drain running requests
(up to ``drain_seconds``) and exit cleanly. Requests still running at the drain deadline end with an
error in their API's schema ("the server is shutting down"), not a cut connection."""

from __future__ import annotations

import asyncio
import logging
import sys

import uvicorn

from ft_serve.server.app import build_app
from ft_serve.server.config import ServerConfig
from ft_serve.server.heap import freeze_loaded_heap

GRACE_SECONDS = 5  # after the drain deadline: for the error events to go out before uvicorn cancels


class _Server(uvicorn.Server):
    def handle_exit(self, sig, frame):
        """SIGINT/SIGTERM: drain, then exit 0 (uvicorn would re-raise the signal after shutdown); a second
        SIGINT forces the exit."""
        if not self.should_exit:
            print(
                f"ft serve: stopping; running requests get up to {self.ft_drain:g} s to finish",
                file=sys.stderr,
                flush=True,
            )
        super().handle_exit(sig, frame)
        self._captured_signals.clear()

    async def shutdown(self, sockets=None):
        """uvicorn's shutdown, plus the drain deadline: then every request still running ends with
        an error update, which its stream renders as its API's error event before closing."""
        timer = asyncio.get_running_loop().call_later(self.ft_drain, self._cut_running)
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()

    def _cut_running(self) -> None:
        n = self.ft_loop.running + self.ft_loop.waiting
        if n:
            print(
                f"ft serve: drain time is over; {n} request(s) still running end with an error",
                file=sys.stderr,
                flush=True,
            )
        self.ft_loop.fail_all()

    async def startup(self, sockets=None):
        await super().startup(sockets)
        if self.started:
            c = self.config
            host = f"[{c.host}]" if ":" in c.host else c.host
            port = (
                self.servers[0].sockets[0].getsockname()[1]
                if self.servers and self.servers[0].sockets
                else c.port
            )
            print(
                f"ft serve: ready at http://{host}:{port} (model {self.ft_model!r}; OpenAI at /v1, Anthropic at "
                f"/v1/messages)",
                file=sys.stderr,
                flush=True,
            )


def make_server(engine, config: ServerConfig, log_level: str = "warning") -> uvicorn.Server:
    app = build_app(engine, config)
    uc = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=int(config.drain_seconds) + GRACE_SECONDS,
        lifespan="on",
    )
    server = _Server(uc)
    server.ft_model = config.model_name
    server.ft_loop, server.ft_drain = app.state.loop, config.drain_seconds
    return server


def serve(engine, config: ServerConfig, log_level: str = "warning") -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = make_server(engine, config, log_level)
    freeze_loaded_heap()  # the loaded model's objects out of every full collection (server/heap.py)
    server.run()
    return 0 if server.started else 1
