"""A recording HTTP proxy for the end-to-end tests: it sits between a harness and ``ft serve``,
passes every request and (streamed) response through unchanged, and keeps both, so that a test can
say which endpoints a harness called, what the server answered (error bodies included) and which
text the model generated."""

from __future__ import annotations

import gzip
import http.client
import json
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "host",
    "content-length",
    "accept-encoding",
}


@dataclass
class Exchange:
    method: str
    path: str
    request: bytes
    status: int = 0
    response: bytearray = field(default_factory=bytearray)
    content_type: str = ""
    started: float = field(default_factory=time.monotonic)
    first_byte_s: float | None = None  # seconds from the request to the first response byte
    total_s: float | None = None

    @property
    def endpoint(self) -> str:
        return self.path.split("?")[0]

    def request_json(self) -> dict:
        try:
            return json.loads(self.request or b"{}")
        except ValueError:
            return {}

    def events(self) -> list[dict]:
        """The JSON ``data:`` payloads of a streamed (text/event-stream) response, in order; [] otherwise."""
        if "text/event-stream" not in self.content_type:
            return []
        events = []
        for line in bytes(self.response).decode("utf-8", "replace").splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    events.append(json.loads(line[5:]))
                except ValueError:
                    pass
        return events

    def generated_text(self) -> str:
        """The text (and reasoning) the model produced in this response, streamed or not, any API."""
        if "text/event-stream" in self.content_type:
            return "".join(_delta_text(e) for e in self.events())
        try:
            return _final_text(json.loads(bytes(self.response).decode("utf-8", "replace")))
        except ValueError:
            return ""


def _delta_text(e: dict) -> str:
    if e.get("type") == "content_block_delta":  # Anthropic
        d = e.get("delta", {})
        return d.get("text", "") or d.get("thinking", "")
    if e.get("type") in (
        "response.output_text.delta",
        "response.reasoning_text.delta",
    ):  # Responses
        return e.get("delta", "")
    out = ""
    for c in e.get("choices") or []:  # Chat Completions
        d = c.get("delta") or {}
        out += (d.get("content") or "") + (d.get("reasoning_content") or "")
    return out


def _final_text(b: dict) -> str:
    if isinstance(b.get("content"), list):  # Anthropic
        return "".join(c.get("text", "") or c.get("thinking", "") for c in b["content"])
    if isinstance(b.get("output"), list):  # Responses
        return "".join(c.get("text", "") for item in b["output"] for c in item.get("content") or [])
    return "".join(((c.get("message") or {}).get("content") or "") for c in b.get("choices") or [])


class Recorder:
    """``with Recorder(upstream) as rec: ... rec.url ... rec.exchanges``."""

    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the response ends when the connection closes: streams pass as they come

            def log_message(self, *a):
                pass

            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    out = b""
                    while (n := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                        out += self.rfile.read(n)
                        self.rfile.readline()
                    self.rfile.readline()
                    return out
                return self.rfile.read(int(self.headers.get("content-length") or 0))

            def _proxy(self):
                raw = self._body()
                ex = Exchange(
                    self.command, self.path, _decoded(raw, self.headers.get("content-encoding", ""))
                )
                with rec._lock:
                    rec.exchanges.append(ex)
                conn = http.client.HTTPConnection(
                    rec.upstream.hostname, rec.upstream.port, timeout=900
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                conn.request(self.command, self.path, body=raw or None, headers=headers)
                resp = conn.getresponse()
                ex.status, ex.content_type = resp.status, resp.getheader("content-type", "")
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP:
                        self.send_header(k, v)
                self.end_headers()
                if self.command == "HEAD":
                    ex.total_s = time.monotonic() - ex.started
                    return
                while chunk := resp.read1(65536):
                    if ex.first_byte_s is None:
                        ex.first_byte_s = time.monotonic() - ex.started
                    ex.response += chunk
                    try:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                    except OSError:  # the client went away; keep recording what the server sends
                        pass
                ex.total_s = time.monotonic() - ex.started
                conn.close()

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = _proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def calls(self, endpoint: str) -> list[Exchange]:
        return [e for e in self.exchanges if e.endpoint == endpoint]

    def summary(self) -> str:
        lines = []
        for e in self.exchanges:
            line = f"{e.method} {e.path} -> {e.status}"
            if e.total_s is not None:
                line += f" (first byte {e.first_byte_s or 0:.1f} s, total {e.total_s:.1f} s, {len(e.request)} B sent)"
            if not 200 <= e.status < 300:
                line += f": {bytes(e.response[:2000]).decode('utf-8', 'replace')}"
            lines.append(line)
        return "\n".join(lines)


def _decoded(raw: bytes, encoding: str) -> bytes:
    try:
        if encoding == "gzip":
            return gzip.decompress(raw)
        if encoding == "deflate":
            return zlib.decompress(raw)
    except (OSError, zlib.error):
        pass
    return raw
