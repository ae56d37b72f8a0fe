"""Test doubles: an OpenAI-style server that only answers ``GET /v1/models``, and harness executables
that record their arguments, environment and working folder as JSON and exit with a chosen status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FAKE_HARNESS = """#!{python}
import json, os, sys
with open(os.environ["FAKE_HARNESS_OUT"], "w") as f:
    json.dump({{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}}, f)
print("fake harness ran")
sys.exit(int(os.environ.get("FAKE_HARNESS_RC", "0")))
"""


class FakeServer:
    """``models``: the ``data`` list of /v1/models; ``api_key``: required as a bearer token when set."""

    def __init__(self, models: list[dict] | None = None, api_key: str | None = None):
        self.models = (
            models
            if models is not None
            else [{"id": "m1", "context_length": 65536, "max_model_len": 65536}]
        )
        self.api_key = api_key
        self.requests: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                fake.requests.append((self.path, dict(self.headers)))
                if fake.api_key and self.headers.get("authorization") != f"Bearer {fake.api_key}":
                    return self._send(401, {"error": {"message": "bad key"}})
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": fake.models})
                self._send(404, {"error": {"message": "not found"}})

            def _send(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._srv.shutdown()
        self._srv.server_close()


def make_fake_harness(bin_dir: Path, name: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / name
    exe.write_text(FAKE_HARNESS.format(python=sys.executable))
    exe.chmod(0o755)
    return exe


def run_agents(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 120):
    """``python -m ft_agents ARGS`` in a child process; the caller's environment plus ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "ft_agents", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
