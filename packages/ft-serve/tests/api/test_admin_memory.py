"""/v1/admin/memory and `ft ctl memory` on a real server: resize during a stream keeps its output,
refused shrinks change nothing, keys and addresses are checked, auto mode follows free memory."""

import subprocess
import sys
import threading
import time

import httpx
import pytest
from starlette.requests import Request

from ft_core import Engine
from ft_serve.api.admin import check_admin
from ft_serve.server.config import ServerConfig
from ft_serve.server.errors import ApiError
from serve_helpers import start_server

ADMIN = "admin-key"


@pytest.fixture(scope="module")
def srv():
    # a context of 384 tokens (24 pages): the KV pool may shrink to 24 pages (one request must fit)
    eng = Engine.from_pretrained(None, moe_backend="fill", moe_cache_slots=32, max_model_len=384)
    s = start_server(eng, api_key="api-key", admin_key=ADMIN)
    yield s
    s.stop()


def admin(srv, method="GET", key=ADMIN, **body):
    h = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.request(
        method,
        srv.url + "/v1/admin/memory",
        headers=h,
        json=body if method == "POST" else None,
        timeout=60,
    )


def stream_text(srv, resize=None) -> str:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "resize me"}],
        "stream": True,
        "max_tokens": 40,
        "temperature": 0,
        "ignore_eos": True,
    }
    out, n = [], 0
    with httpx.stream(
        "POST",
        srv.url + "/v1/chat/completions",
        json=body,
        timeout=60,
        headers={"authorization": "Bearer api-key"},
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                n += 1
                out.append(line)
                if n == 5 and resize is not None:
                    resize()
    import json

    return "".join(
        (json.loads(x[6:])["choices"] or [{}])[0].get("delta", {}).get("content") or "" for x in out
    )


def test_keys_are_checked(srv):
    assert admin(srv, key=None).status_code == 401
    assert admin(srv, key="wrong").status_code == 401
    assert admin(srv, key="api-key").status_code == 200
    r = admin(srv)
    assert r.status_code == 200 and r.json()["split"]["expert_slots"] == 32


def test_non_loopback_callers_are_refused_unless_allowed():
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/admin/memory",
        "headers": [(b"authorization", b"Bearer k")],
        "client": ("10.1.2.3", 5555),
        "query_string": b"",
    }
    with pytest.raises(ApiError) as e:
        check_admin(ServerConfig(model_name="m", admin_key="k"), Request(scope))
    assert e.value.status == 403
    check_admin(
        ServerConfig(model_name="m", admin_key="k", admin_allow_remote=True), Request(scope)
    )
    with pytest.raises(ApiError) as e:  # no key configured: remote callers never
        check_admin(ServerConfig(model_name="m", admin_allow_remote=True), Request(scope))
    assert e.value.status == 403
    check_admin(ServerConfig(model_name="m"), Request({**scope, "client": ("127.0.0.1", 1)}))


def test_resize_during_a_stream_keeps_its_output(srv):
    ref = stream_text(srv)
    split = admin(srv).json()["split"]
    done = {}

    def shrink():
        done["r"] = admin(
            srv, "POST", kv=f"{split['page_bytes'] * 24}", experts=split["slot_bytes"] * 6
        )

    text = stream_text(srv, shrink)
    assert done["r"].status_code == 200, done["r"].text
    assert text == ref
    after = admin(srv).json()
    assert after["split"]["expert_slots"] == 6 and after["split"]["kv_pages"] == 24
    assert after["history"][-1]["reason"] == "admin"
    assert (
        admin(srv, "POST", experts=split["slot_bytes"] * 32, kv=split["kv"]).status_code == 200
    )  # grow back
    metrics = httpx.get(srv.url + "/metrics", headers={"authorization": "Bearer api-key"}).text
    assert 'ft_memory_bytes{model="ft-test",pool="experts"}' in metrics


def test_refused_and_malformed_resizes(srv):
    before = admin(srv).json()["split"]
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hold pages " * 40}],
        "stream": True,
        "max_tokens": 200,
        "ignore_eos": True,
    }
    stop = threading.Event()

    def reader():  # keeps reading (a client that stops reading is one that left)
        with httpx.stream(
            "POST",
            srv.url + "/v1/chat/completions",
            json=body,
            timeout=60,
            headers={"authorization": "Bearer api-key"},
        ) as r:
            for _ in r.iter_lines():
                if stop.is_set():
                    return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    deadline = time.time() + 20
    while srv.app.state.loop.running == 0 and time.time() < deadline:
        time.sleep(0.01)
    r409 = admin(srv, "POST", kv=before["page_bytes"])  # one page: the stream holds more
    stop.set()
    t.join(30)
    msg = r409.json()["error"]["message"]  # held pages, or below one request of max_model_len
    assert r409.status_code == 409 and r409.json()["error"]["param"] == "kv", msg
    assert "running requests hold" in msg or "below the minimum of 786432 bytes" in msg
    assert admin(srv).json()["split"]["kv_pages"] == before["kv_pages"]
    r = admin(srv, "POST", kv="lots")
    assert r.status_code == 400 and r.json()["error"]["param"] == "kv"
    assert admin(srv, "POST", colour="blue").status_code == 400
    assert admin(srv, "POST").status_code == 400


def test_ft_ctl_memory(srv):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ft_serve.cli",
            "ctl",
            "memory",
            "--server",
            srv.url,
            "--key",
            ADMIN,
            "--experts",
            "8MiB",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "experts" in r.stdout and "resizes so far" in r.stdout
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ft_serve.cli",
            "ctl",
            "memory",
            "--server",
            srv.url,
            "--key",
            "bad",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "401" in r.stderr and "invalid admin key" in r.stderr


def test_auto_mode_follows_simulated_free_memory(tmp_path):
    free = tmp_path / "free"
    G = 1 << 30
    free.write_text(str(4 * G))
    eng = Engine.from_pretrained(None, moe_backend="fill", moe_cache_slots=64)
    s = start_server(
        eng, elastic="auto", elastic_source=f"file:{free}", elastic_reserve=G, elastic_interval=0.05
    )
    try:

        def split():
            return httpx.get(s.url + "/v1/admin/memory").json()

        start = split()["split"]["total"]
        time.sleep(0.3)
        assert split()["resizes"] == 0  # plenty free: nothing to do
        free.write_text(str(G - start // 2))  # another program takes memory
        deadline = time.time() + 10
        while split()["split"]["total"] >= start and time.time() < deadline:
            time.sleep(0.05)
        shrunk = split()
        assert shrunk["split"]["total"] <= start - start // 2 + shrunk["split"]["slot_bytes"]
        assert shrunk["history"][-1]["reason"].startswith("auto")
        free.write_text(str(4 * G))  # released
        while split()["split"]["total"] < start and time.time() < deadline + 10:
            time.sleep(0.05)
        assert split()["split"]["total"] == start
    finally:
        s.stop()
