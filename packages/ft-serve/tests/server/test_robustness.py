"""No request can break the server (issue 14, defects 1, 2 body parsing, 6, 7), against real servers
on loopback over a private demo engine; faults are injected into that real engine, nothing stands in
for the server:

- an exception of one request in the engine loop fails that request only; a dead or wedged engine
  thread makes /health answer 503;
- prompts are rendered and tokenized off the event loop, once; bodies over --max-body-size get 413;
- JSON nested too deep or holding a lone surrogate is a 400 naming the limit or the field;
- streams still running at the drain deadline end with their API's error event, no traceback.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import anthropic
import httpx
import openai
import pytest
from ft_core import Engine

from serve_helpers import start_server

HI = [{"role": "user", "content": "hi"}]
ENDPOINTS = {  # path -> (a small valid body, the error schema)
    "/v1/chat/completions": ({"model": "m", "messages": HI, "max_tokens": 2}, "openai"),
    "/v1/completions": ({"model": "m", "prompt": "hi", "max_tokens": 2}, "openai"),
    "/v1/responses": ({"model": "m", "input": "hi", "max_output_tokens": 16}, "openai"),
    "/v1/messages": ({"model": "m", "messages": HI, "max_tokens": 2}, "anthropic"),
}
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def engine():
    """A private demo engine: the tests inject faults into it (restored after each test)."""
    return Engine.from_pretrained(None)


@pytest.fixture(scope="module")
def server(engine):
    s = start_server(engine, max_body_size=1 << 20)
    yield s
    s.stop()


def post(url: str, path: str, body, timeout: float = 60) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url + path, content=raw, headers=JSON, timeout=timeout)


def error_of(r: httpx.Response, schema: str) -> dict:
    """The error object of ``r`` in ``schema``; asserts the shape."""
    body = r.json()
    if schema == "anthropic":
        assert body["type"] == "error" and set(body["error"]) >= {"type", "message"}, body
        return body["error"]
    assert set(body["error"]) >= {"message", "type", "param", "code"}, body
    return body["error"]


def assert_serves(url: str) -> None:
    for path, (body, _) in ENDPOINTS.items():
        r = post(url, path, body)
        assert r.status_code == 200, (path, r.text)
    assert httpx.get(url + "/health").json()["status"] == "ok"


# ---- defect 1: one request cannot kill the engine loop ---------------------------------------
@pytest.mark.parametrize("path", list(ENDPOINTS))
def test_seed_outside_int64_kills_nothing(server, path):
    body, schema = ENDPOINTS[path]
    for seed in (2**64, -(2**63) - 1):
        r = post(server.url, path, {**body, "seed": seed})
        if path == "/v1/messages" and r.status_code == 200:
            continue  # not an Anthropic field: ignored
        assert r.status_code in (400, 500), r.text  # 400 once the API checks it; never a hang
        error_of(r, schema)
    assert_serves(server.url)


@pytest.mark.parametrize("path", list(ENDPOINTS))
def test_an_exception_while_admitting_fails_that_request_only(server, engine, monkeypatch, path):
    real, calls = engine.add_request, []

    def add_request(*args, **kw):  # the first request hits a bug inside the engine
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("Overflow when unpacking long long")
        return real(*args, **kw)

    monkeypatch.setattr(engine, "add_request", add_request)
    body, schema = ENDPOINTS[path]
    r = post(server.url, path, body)
    assert r.status_code == 500
    err = error_of(r, schema)
    assert "Overflow" not in err["message"] and "server log" in err["message"]
    assert_serves(server.url)


def test_exceptions_while_sending_and_aborting_fail_one_request(server, engine, monkeypatch):
    loop = server.app.state.loop
    real_abort, aborts = engine.abort, []

    def abort(seq):
        aborts.append(seq)
        raise RuntimeError("abort bug")

    monkeypatch.setattr(engine, "abort", abort)
    body = {"model": "m", "messages": HI, "max_tokens": 500, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i > 4:
                break  # the client goes away: the abort raises inside the engine loop
    deadline = time.time() + 20
    while not aborts and time.time() < deadline:
        time.sleep(0.02)
    monkeypatch.setattr(engine, "abort", real_abort)
    for seq in aborts:
        engine.abort(seq)  # free its pages now (through the loop the test would race it)
    assert aborts and loop.health()["status"] == "ok"
    assert_serves(server.url)


class _Killed(BaseException):
    """Not an Exception: nothing per-request catches it, so the engine thread ends."""


def test_dead_engine_thread_fails_requests_and_health_says_503(engine, monkeypatch):
    s = start_server(engine)
    try:
        assert httpx.get(s.url + "/health").json()["status"] == "ok"

        def step():
            raise _Killed()

        monkeypatch.setattr(engine, "step", step)
        r = post(s.url, "/v1/chat/completions", ENDPOINTS["/v1/chat/completions"][0], timeout=30)
        assert r.status_code == 500 and "engine thread stopped" in error_of(r, "openai")["message"]
        h = httpx.get(s.url + "/health")
        assert h.status_code == 503 and h.json()["status"] == "dead", h.text
        r = post(s.url, "/v1/messages", ENDPOINTS["/v1/messages"][0], timeout=10)
        assert r.status_code == 503 and error_of(r, "anthropic")["type"] == "overloaded_error"
    finally:
        s.stop()


def test_wedged_engine_thread_makes_health_503_until_it_ticks(engine, monkeypatch):
    s = start_server(engine, engine_stall_seconds=0.3)
    release, real = threading.Event(), engine.step

    def step():
        release.wait(30)  # one step that does not return (a stuck kernel)
        return real()

    monkeypatch.setattr(engine, "step", step)
    try:
        done = []
        body = ENDPOINTS["/v1/chat/completions"][0]
        t = threading.Thread(target=lambda: done.append(post(s.url, "/v1/chat/completions", body)))
        t.start()
        deadline, h = time.time() + 20, None
        while time.time() < deadline:
            h = httpx.get(s.url + "/health")
            if h.status_code == 503:
                break
            time.sleep(0.05)
        assert h.status_code == 503 and h.json()["status"] == "wedged", h.text
        release.set()
        t.join(30)
        assert done and done[0].status_code == 200
        assert httpx.get(s.url + "/health").status_code == 200
    finally:
        release.set()
        s.stop()


# ---- defect 6: rendering off the event loop, once; bodies capped ----------------------------
def test_a_prompt_being_rendered_does_not_block_other_requests(server, engine, monkeypatch):
    """The first request stays inside the chat template until the second one has been answered:
    with rendering on the event loop, the second could never be answered (the test would fail)."""
    tok, real = engine.tokenizer, engine.tokenizer.apply_chat_template
    entered, release, threads = threading.Event(), threading.Event(), []

    def apply_chat_template(messages, **kw):
        threads.append(threading.current_thread())
        if "BLOCK" in str(messages[-1].get("content")):
            entered.set()
            release.wait(30)
        return real(messages, **kw)

    monkeypatch.setattr(tok, "apply_chat_template", apply_chat_template)
    big, out = [{"role": "user", "content": "BLOCK " + "x" * 100_000}], []
    t = threading.Thread(
        target=lambda: out.append(
            post(server.url, "/v1/chat/completions", {"model": "m", "messages": big})
        )
    )
    t.start()
    try:
        assert entered.wait(30)
        small = post(server.url, "/v1/chat/completions", ENDPOINTS["/v1/chat/completions"][0], 20)
        assert small.status_code == 200 and not out, "the small request waited for the big one"
    finally:
        release.set()
        t.join(60)
    assert out[0].status_code == 400  # 100k characters do not fit the demo's context
    assert server.thread not in threads  # uvicorn's event loop runs in server.thread


def test_long_text_encode_lets_other_threads_run(engine):
    tok = engine.tokenizer
    text = "".join(f"word{i} and, some more text; " for i in range(8000))  # ~220 KB
    ids, ticks = [], 0
    t = threading.Thread(target=lambda: ids.append(tok.encode(text, add_special_tokens=False)))
    t.start()
    while t.is_alive():
        time.sleep(0.001)
        ticks += 1  # holding the GIL for the whole encode leaves this at 1 or 2
    assert ticks >= 5
    assert ids[0] == tok._tok.encode(text, add_special_tokens=False).ids


def test_too_long_anthropic_prompt_is_rendered_once(server, engine, monkeypatch):
    tok, real, calls = engine.tokenizer, engine.tokenizer.apply_chat_template, []
    counted = lambda *a, **kw: calls.append(1) or real(*a, **kw)  # noqa: E731
    monkeypatch.setattr(tok, "apply_chat_template", counted)
    long = [{"role": "user", "content": "word " * 5000}]
    r = post(server.url, "/v1/messages", {"model": "m", "messages": long, "max_tokens": 2})
    assert r.status_code == 400 and "prompt is too long" in error_of(r, "anthropic")["message"]
    assert len(calls) == 1


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_oversized_body_is_a_413_in_the_apis_schema(server, path):
    body, schema = ENDPOINTS[path]
    big = json.dumps({**body, "messages": [{"role": "user", "content": "x" * (2 << 20)}]}).encode()
    r = post(server.url, path, big)  # Content-Length says it
    assert r.status_code == 413
    err = error_of(r, schema)
    assert str(1 << 20) in err["message"] and "--max-body-size" in err["message"]
    want = "request_too_large" if schema == "anthropic" else "invalid_request_error"
    assert err["type"] == want

    def chunks():  # no Content-Length: counted while reading
        for i in range(0, len(big), 1 << 16):
            yield big[i : i + (1 << 16)]

    r = httpx.post(server.url + path, content=chunks(), headers=JSON, timeout=60)
    assert r.status_code == 413 and error_of(r, schema)
    assert_serves(server.url)


def test_sdks_see_the_413(server):
    huge = [{"role": "user", "content": "x" * (2 << 20)}]
    oa = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as e:
        oa.chat.completions.create(model="m", messages=huge, max_tokens=2)
    assert e.value.status_code == 413
    an = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as e:
        an.messages.create(model="m", messages=huge, max_tokens=2)
    assert e.value.status_code == 413 and e.value.body["error"]["type"] == "request_too_large"


# ---- defect 2: bodies that used to crash the parser or the tokenizer -------------------------
@pytest.mark.parametrize("path", list(ENDPOINTS))
@pytest.mark.parametrize("depth", [100_000, 200])
def test_deep_nesting_is_a_400_naming_the_limit(server, path, depth):
    body, schema = ENDPOINTS[path]
    raw = json.dumps(body)[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    r = post(server.url, path, raw.encode())
    assert r.status_code == 400 and "128 levels" in error_of(r, schema)["message"]


def test_a_deep_but_reasonable_tool_schema_is_served(server):
    schema = {"type": "string"}
    for _ in range(40):  # 80 JSON levels inside the tool's parameters
        schema = {"type": "object", "properties": {"a": schema}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    body = {**ENDPOINTS["/v1/chat/completions"][0], "tools": tools}
    assert post(server.url, "/v1/chat/completions", body).status_code == 200


@pytest.mark.parametrize(
    "path, body, param",
    [
        (
            "/v1/chat/completions",
            {"model": "m", "messages": [{"role": "user", "content": "a\ud800b"}]},
            "messages[0].content",
        ),
        ("/v1/completions", {"model": "m", "prompt": ["ok", "a\udfffb"]}, "prompt[1]"),
        ("/v1/responses", {"model": "m", "input": "a\ud800b"}, "input"),
        (
            "/v1/messages",
            {
                "model": "m",
                "max_tokens": 2,
                "system": "ok",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}],
            },
            "messages[0].content[0].text",
        ),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": HI, "metadata": {"k\ud800": "v"}},
            "metadata.k\\ud800",
        ),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(server, path, body, param):
    r = post(server.url, path, json.dumps(body).encode())  # json.dumps writes the \ud800 escape
    assert r.status_code == 400, r.text
    err = error_of(r, ENDPOINTS[path][1])
    assert param in err["message"] and "surrogate" in err["message"]
    if ENDPOINTS[path][1] == "openai":
        assert err["param"] == param


# ---- defect 7: the drain deadline ends streams with an error event ---------------------------
STREAMS = {
    "/v1/chat/completions": {"model": "m", "messages": HI, "stream": True},
    "/v1/completions": {"model": "m", "prompt": "hi", "stream": True},
    "/v1/responses": {"model": "m", "input": "hi", "stream": True},
    "/v1/messages": {"model": "m", "messages": HI, "stream": True},
}


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def _stream_lines(url: str, path: str, out: list) -> None:
    body = {
        **STREAMS[path],
        "ignore_eos": True,
        "max_output_tokens" if path == "/v1/responses" else "max_tokens": 3000,
    }
    with httpx.stream("POST", url + path, json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line:
                out.append(line)


def test_streams_running_at_the_drain_deadline_get_an_error_event(engine, monkeypatch):
    real = engine.step
    monkeypatch.setattr(engine, "step", lambda: time.sleep(0.01) or real())  # 3000 tokens: 30+ s
    logs = _Records()
    for name in ("uvicorn", "uvicorn.error", "ft.serve"):
        logging.getLogger(name).addHandler(logs)
    s = start_server(engine, drain_seconds=1)
    got = {p: [] for p in STREAMS}
    clients = [threading.Thread(target=_stream_lines, args=(s.url, p, got[p])) for p in STREAMS]
    try:
        for c in clients:
            c.start()
        deadline = time.time() + 30
        while min(len(v) for v in got.values()) < 8 and time.time() < deadline:
            time.sleep(0.02)
        t0 = time.time()
        s.stop()
        assert time.time() - t0 < 20 and not s.thread.is_alive()
        for c in clients:
            c.join(10)
    finally:
        for name in ("uvicorn", "uvicorn.error", "ft.serve"):
            logging.getLogger(name).removeHandler(logs)
    for p in ("/v1/chat/completions", "/v1/completions"):
        assert got[p][-1] == "data: [DONE]", got[p][-3:]
        err = json.loads(got[p][-2][6:])["error"]
        assert "shutting down" in err["message"], err
    last = json.loads(got["/v1/messages"][-1][6:])
    assert got["/v1/messages"][-2] == "event: error" and last["error"]["type"] == "overloaded_error"
    assert "shutting down" in last["error"]["message"]
    failed = json.loads(got["/v1/responses"][-1][6:])
    assert failed["type"] == "response.failed"
    assert "shutting down" in failed["response"]["error"]["message"]
    bad = [r for r in logs.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]
