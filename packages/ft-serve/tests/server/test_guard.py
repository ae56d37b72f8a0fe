"""Browser rules (server/guard.py), keys out of `ps`, /metrics behind the key, admin 400 / 409: a
real server on loopback, requests forging what a hostile web page's browser would send."""

import json
import os
import re
import socket
import subprocess
import sys
import time

import httpx
import pytest

from ft_core import Engine
from ft_core.errors import FTError
from ft_serve.server.config import ServerConfig
from ft_serve.server.guard import GuardRules
from serve_helpers import start_server

KEY, ADMIN, APP = "guard-key", "guard-admin", "https://app.example"
EVIL = "https://evil.example"


@pytest.fixture(scope="module")
def srv():
    eng = Engine.from_pretrained(None, max_model_len=256)  # the smallest KV pool: 16 pages
    s = start_server(eng, api_key=KEY, admin_key=ADMIN, allowed_origins=(APP,))
    yield s
    s.stop()


def auth(key=KEY, **extra):
    return {"authorization": f"Bearer {key}", **extra}


def split(srv) -> dict:
    return httpx.get(srv.url + "/v1/admin/memory", headers=auth(ADMIN)).json()["split"]


def post_admin(srv, raw: bytes, ctype="application/json", **headers):
    return httpx.post(
        srv.url + "/v1/admin/memory",
        content=raw,
        headers=auth(ADMIN, **{"content-type": ctype}, **headers),
    )


def test_a_page_cannot_post_text_plain_or_from_its_origin(srv):
    """The report's request: text/plain + Origin evil from loopback (no preflight needed) shrank the
    pool. Now 403 (origin) or 415 (content type) in the API's schema, and nothing changes."""
    before = split(srv)
    r = post_admin(srv, b'{"kv": 1.5}', "text/plain", origin=EVIL)
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    assert "--allowed-origins https://evil.example" in r.json()["error"]["message"]
    assert "access-control-allow-origin" not in r.headers
    r = post_admin(srv, b'{"kv": 1.5}', "text/plain")
    assert r.status_code == 415 and r.json()["error"]["type"] == "invalid_request_error"
    r = post_admin(srv, b'{"kv": 1.5}', "application/x-www-form-urlencoded", origin=APP)
    assert r.status_code == 415  # even a listed origin: a body must be JSON
    anthropic_h = {"x-api-key": KEY, "content-type": "application/json"}
    r = httpx.post(srv.url + "/v1/messages", content=b"{}", headers={**anthropic_h, "origin": EVIL})
    assert r.status_code == 403 and r.json()["type"] == "error"  # Anthropic's schema there
    r = httpx.post(srv.url + "/v1/messages", content=b"{}", headers={"x-api-key": KEY})  # no type
    assert r.status_code == 415 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(
        srv.url + "/v1/chat/completions",
        headers=auth(origin="http://localhost:3000"),
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 403  # a page on another local port is another program
    assert split(srv) == before


def test_refusals_come_before_the_body_is_read(srv):
    """Headers announcing a 1 MB body, no body sent: the answer comes at once."""
    port = int(srv.url.rsplit(":", 1)[1])
    for extra in (
        b"Origin: https://evil.example\r\nContent-Type: application/json\r\n",
        b"Host: evil.example\r\nContent-Type: application/json\r\n",
        b"Content-Type: text/plain\r\n",
    ):
        head = b"POST /v1/admin/memory HTTP/1.1\r\nContent-Length: 1000000\r\n" + extra
        if b"Host:" not in extra:
            head += f"Host: 127.0.0.1:{port}\r\n".encode()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(head + b"\r\n")
            status = s.recv(4096).split(b"\r\n", 1)[0]
        assert status.split()[1] in (b"403", b"415"), (extra, status)


def test_dns_rebinding_hosts_are_refused(srv):
    port = srv.url.rsplit(":", 1)[1]
    for host in (
        "evil.example",
        f"evil.example:{port}",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
    ):
        r = httpx.get(srv.url + "/v1/models", headers=auth(host=host))
        assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed", host
        assert "--allowed-hosts" in r.json()["error"]["message"]
    r = httpx.get(srv.url + "/health", headers={"host": "evil.example"})
    assert r.status_code == 403  # every route
    for host in (f"localhost:{port}", "LOCALHOST.", f"127.0.0.1:{port}", "[::1]:9", "10.1.2.3"):
        assert httpx.get(srv.url + "/v1/models", headers=auth(host=host)).status_code == 200, host


def test_preflight_and_cors_for_a_listed_origin(srv):
    pre = {
        "origin": APP,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type, x-stainless-os",
        "access-control-request-private-network": "true",
    }
    r = httpx.options(srv.url + "/v1/chat/completions", headers=pre)
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == APP
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"] == pre["access-control-request-headers"]
    assert r.headers["access-control-allow-private-network"] == "true"
    assert "access-control-allow-credentials" not in r.headers
    r = httpx.options(srv.url + "/v1/chat/completions", headers={**pre, "origin": EVIL})
    assert r.status_code == 403
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(srv.url + "/v1/chat/completions", json=body, headers=auth(origin=APP))
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP
    assert r.headers["vary"] == "Origin"
    own = srv.url  # a page of the server's own origin is the server itself
    r = httpx.post(srv.url + "/v1/chat/completions", json=body, headers=auth(origin=own))
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_rules_from_the_config():
    """Origin patterns, --host names and the opt-in wildcards (the parsing the server uses)."""
    rules = GuardRules.from_config(
        ServerConfig(
            model_name="m",
            host="gpu-box.lan",
            allowed_hosts=("Proxy.Example",),
            allowed_origins=("http://localhost:*", "chrome-extension://*"),
        )
    )
    assert rules.host_ok("gpu-box.lan:8000") and rules.host_ok("proxy.example")
    assert rules.host_ok(None)  # HTTP/1.0: not a browser
    assert not rules.host_ok("evil.example") and not rules.host_ok("box.lan")
    assert rules.listed("http://localhost:3000") and rules.listed("chrome-extension://abc")
    assert not rules.listed("http://localhost.evil.example")
    assert not rules.listed("https://localhost:1")
    wide = GuardRules.from_config(
        ServerConfig(model_name="m", host="0.0.0.0", allowed_hosts=("*",), allowed_origins=("*",))
    )
    assert wide.host_ok("anything.example") and wide.listed("null") and wide.listed(EVIL)
    bound = GuardRules.from_config(ServerConfig(model_name="m", host="0.0.0.0"))
    assert bound.host_ok("192.168.1.20:8000") and not bound.host_ok("my-laptop")
    with pytest.raises(FTError, match="scheme://host"):
        GuardRules.from_config(ServerConfig(model_name="m", allowed_origins=("localhost:3000",)))


def test_admin_values_that_are_not_sizes_are_400_naming_the_field(srv):
    before = split(srv)
    cases = (
        (b'{"kv": 1000000000000000000000000000000}', "kv"),
        (b'{"total": NaN}', "total"),
        (b'{"total": Infinity}', "total"),
        (b'{"kv": -1}', "kv"),
        (b'{"kv": [1]}', "kv"),
        (b'{"experts": "lots"}', "experts"),
        (b'{"kv": true}', "kv"),
        (b'{"kv": "1MiB", "reason": {"a": 1}}', "reason"),
    )
    for raw, field in cases:
        r = post_admin(srv, raw)
        assert r.status_code == 400 and r.json()["error"]["param"] == field, (raw, r.text)
        assert field in r.json()["error"]["message"]
    assert split(srv) == before


def test_resizes_below_one_request_are_409_naming_the_minimum(srv):
    before = split(srv)
    least = 16 * before["page_bytes"]  # max_model_len 256 / 16 tokens a page
    for body in ({"kv": 0}, {"kv": 1.5}, {"kv": least - 1}, {"total": 1024}):
        r = post_admin(srv, json.dumps(body).encode())
        err = r.json()["error"]
        assert r.status_code == 409 and err["param"] == next(iter(body)), r.text
        assert str(least) in err["message"] and "max_model_len=256" in err["message"]
    assert split(srv) == before
    got = httpx.get(srv.url + "/v1/admin/memory", headers=auth(ADMIN)).json()["minimum"]
    assert got["kv"] == least
    r = post_admin(srv, json.dumps({"kv": least}).encode())  # exactly one request: allowed
    assert r.status_code == 200 and r.json()["split"]["kv_pages"] == 16
    body = {"model": "m", "messages": [{"role": "user", "content": "still " * 20}], "max_tokens": 4}
    r = httpx.post(srv.url + "/v1/chat/completions", json=body, headers=auth())
    assert r.status_code == 200  # and it still serves
    assert post_admin(srv, json.dumps({"kv": before["kv"]}).encode()).status_code == 200


def test_metrics_need_the_key(srv):
    assert httpx.get(srv.url + "/metrics").status_code == 401
    assert httpx.get(srv.url + "/metrics", headers=auth("wrong")).status_code == 401
    r = httpx.get(srv.url + "/metrics", headers=auth())
    assert r.status_code == 200 and "ft_" in r.text


def _ready_url(proc, deadline=120) -> str:
    end = time.time() + deadline
    while time.time() < end:
        line = proc.stderr.readline()
        if m := re.search(r"ready at (http://\S+)", line):
            return m.group(1)
        if not line and proc.poll() is not None:
            break
    raise AssertionError("ft serve did not start")


def test_keys_from_a_file_and_the_environment_through_ft_serve(tmp_path):
    """`ft serve --api-key-file` and $FT_ADMIN_KEY: the keys work and are not on its command line;
    --metrics-public and --allowed-hosts come through the real CLI parsing."""
    (tmp_path / "key").write_text("file-key\n")
    env = {**os.environ, "FT_ADMIN_KEY": "env-admin"}
    env.pop("FT_API_KEY", None)
    argv = [
        sys.executable,
        "-m",
        "ft_serve.cli",
        "serve",
        "--port",
        "0",
        "--max-model-len",
        "256",
        "--api-key-file",
        str(tmp_path / "key"),
        "--metrics-public",
        "--allowed-hosts",
        "box.lan",
    ]
    proc = subprocess.Popen(
        argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    try:
        url = _ready_url(proc)
        cmdline = open(f"/proc/{proc.pid}/cmdline", "rb").read() if sys.platform == "linux" else b""
        assert b"file-key" not in cmdline and b"env-admin" not in cmdline
        assert httpx.get(url + "/v1/models").status_code == 401
        r = httpx.get(url + "/v1/models", headers=auth("file-key", host="box.lan"))
        assert r.status_code == 200
        assert httpx.get(url + "/v1/admin/memory", headers=auth("env-admin")).status_code == 200
        assert httpx.get(url + "/v1/admin/memory", headers=auth("wrong")).status_code == 401
        assert httpx.get(url + "/metrics").status_code == 200  # --metrics-public
    finally:
        proc.terminate()
        proc.wait(30)


def test_key_flags_are_checked_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """The real `ft serve` entry point, in this process: a missing or empty key file, or a key both
    given and read from a file, stop it with one line (before any model is loaded)."""
    from ft_serve.cli import main

    (tmp_path / "empty").write_text("\n")
    monkeypatch.setenv("FT_API_KEY", "from-env")
    empty = str(tmp_path / "empty")
    for extra, words in (
        (["--api-key-file", str(tmp_path / "missing")], "cannot read it"),
        (["--api-key-file", empty], "found nothing"),
        (["--admin-key", "a", "--admin-key-file", empty], "not both"),
    ):
        assert main(["serve", "--model", str(tmp_path / "no-model"), *extra]) == 1
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err
