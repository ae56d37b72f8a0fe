"""Start a real ft server on loopback (uvicorn in a thread, port chosen by the OS) for the API tests."""

from __future__ import annotations

import threading
import time

from ft_serve.server.config import ServerConfig
from ft_serve.server.run import make_server

API_KEY = "test-key"


class Running:
    def __init__(self, server, thread):
        self.server, self.thread = server, thread
        port = server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.app = server.config.app

    def stop(self):
        self.server.should_exit = True
        self.thread.join(30)


def start_server(engine, **config) -> Running:
    cfg = ServerConfig(**{"model_name": "ft-test", "port": 0, "drain_seconds": 5, **config})
    server = make_server(engine, cfg)
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.time() + 60
    while not server.started:
        if time.time() > deadline or not t.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    return Running(server, t)
