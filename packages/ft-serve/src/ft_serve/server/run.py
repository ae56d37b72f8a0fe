"""Run the server with uvicorn: one ready line with the URL; SIGINT/SIGTERM drain running requests
(up to ``drain_seconds``) and exit cleanly."""

from __future__ import annotations

import logging
import sys

import uvicorn

from ft_serve.server.app import build_app
from ft_serve.server.config import ServerConfig


class _Server(uvicorn.Server):
    def handle_exit(self, sig, frame):
        """SIGINT/SIGTERM: drain, then exit 0 (uvicorn would re-raise the signal after shutdown); a second
        SIGINT forces the exit."""
        if not self.should_exit:
            print(f"ft serve: stopping; running requests get up to {self.config.timeout_graceful_shutdown} s to finish",
                  file=sys.stderr, flush=True)
        super().handle_exit(sig, frame)
        self._captured_signals.clear()

    async def startup(self, sockets=None):
        await super().startup(sockets)
        if self.started:
            c = self.config
            host = f"[{c.host}]" if ":" in c.host else c.host
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers and self.servers[0].sockets else c.port
            print(f"ft serve: ready at http://{host}:{port} (model {self.ft_model!r}; OpenAI at /v1, Anthropic at "
                  f"/v1/messages)", file=sys.stderr, flush=True)


def make_server(engine, config: ServerConfig, log_level: str = "warning") -> uvicorn.Server:
    app = build_app(engine, config)
    uc = uvicorn.Config(app, host=config.host, port=config.port, log_level=log_level, access_log=False,
                        timeout_graceful_shutdown=int(config.drain_seconds), lifespan="on")
    server = _Server(uc)
    server.ft_model = config.model_name
    return server


def serve(engine, config: ServerConfig, log_level: str = "warning") -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = make_server(engine, config, log_level)
    server.run()
    return 0 if server.started else 1
