"""Anthropic Messages (/v1/messages, /v1/messages/count_tokens) against a real server, with the real
``anthropic`` SDK; the block/stream machinery with fake generations where the random demo model
cannot be made to think or call tools."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import pytest
from ft_serve.api.anthropic_blocks import BlockWriter, paced, sign_thinking, stream_message
from ft_serve.parsers import Event

from serve_helpers import API_KEY

MODEL = "ft-test"
HI = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather of a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=60)


def post(server, body: dict, path: str = "/v1/messages", key: str = API_KEY) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers={"x-api-key": key}, timeout=60)


def sse(text: str) -> list[tuple[str, dict]]:
    """(event name, data) pairs of an SSE body; the name must equal the data's type."""
    out = []
    for chunk in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.split("\n"))
        name, data = lines["event"], json.loads(lines["data"])
        assert data["type"] == name
        out.append((name, data))
    return out


def check_sequence(events: list[tuple[str, dict]]) -> list[dict]:
    """Asserts the Anthropic event grammar; returns the content blocks as started."""
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == [
        "message_delta",
        "message_stop",
    ]
    blocks, open_ = [], None
    for name, d in events[2:-2]:
        if name == "content_block_start":
            assert open_ is None and d["index"] == len(blocks)
            open_ = d["index"]
            blocks.append(d["content_block"])
        elif name == "content_block_delta":
            assert d["index"] == open_
        elif name == "content_block_stop":
            assert d["index"] == open_
            open_ = None
        else:
            assert name == "ping", name
    assert open_ is None
    return blocks


# ---- the real server -----------------------------------------------------------------------------


def test_create_non_stream(client):
    m = client.messages.create(model=MODEL, max_tokens=6, messages=HI)
    assert (
        m.type == "message"
        and m.role == "assistant"
        and m.id.startswith("msg_")
        and m.model == MODEL
    )
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert all(b.type == "text" for b in m.content)
    u = m.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 6
    assert u.cache_read_input_tokens is not None and u.cache_creation_input_tokens == 0


def test_stream_sdk_and_raw_events(client, server):
    with client.messages.stream(model=MODEL, max_tokens=6, messages=HI) as s:
        final = s.get_final_message()
    assert final.usage.output_tokens > 0 and final.stop_reason in ("end_turn", "max_tokens")
    total = final.usage.input_tokens + final.usage.cache_read_input_tokens
    r = post(server, {"model": MODEL, "max_tokens": 6, "messages": HI, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse(r.text)
    check_sequence(events)
    start, delta = events[0][1]["message"], events[-2][1]
    assert (
        start["content"] == []
        and start["stop_reason"] is None
        and start["usage"]["input_tokens"] == total
    )
    u = delta["usage"]
    assert u["input_tokens"] + u["cache_read_input_tokens"] == total and u["output_tokens"] > 0
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens")


def test_create_stream_true(client):
    kinds = [
        e.type for e in client.messages.create(model=MODEL, max_tokens=4, messages=HI, stream=True)
    ]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds


def test_claude_code_shaped_request(client, server):
    """What Claude Code sends (DESIGN §6), through the beta endpoint (/v1/messages?beta=true)."""
    body = {
        "model": MODEL,
        "max_tokens": 6,
        "stream": True,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0; cch=abc"},
            {
                "type": "text",
                "text": "You are a coding agent.",
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "messages": [
            {"role": "system", "content": "Extra system text."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>x</system-reminder>"},
                    {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
                ],
            },
        ],
        "tools": [
            {**TOOLS[0], "cache_control": {"type": "ephemeral"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        ],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "adaptive"},
        "metadata": {"user_id": "u1"},
    }
    extra = {
        "output_config": {"effort": "high"},
        "service_tier": "auto",
        "temperature": 1,
        "mcp_servers": [],
        "container": None,
        "some_new_field": 1,
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    }
    kinds = [
        e.type
        for e in client.beta.messages.create(
            **body, betas=["interleaved-thinking-2025-05-14"], extra_body=extra
        )
    ]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    # an enabled budget is >= 1024 and below max_tokens (as Anthropic requires)
    m = client.beta.messages.create(
        **{
            **body,
            "stream": False,
            "max_tokens": 1025,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
        },
        extra_body=extra,
    )
    assert m.usage.output_tokens > 0
    r = httpx.post(
        server.url + "/v1/messages?beta=true",
        json={**body, **extra, "stream": False},
        headers={"authorization": f"Bearer {API_KEY}", "anthropic-beta": "x"},
        timeout=60,
    )
    assert r.status_code == 200, r.text


def test_count_tokens(client):
    def count(**kw) -> int:
        return client.messages.count_tokens(model=MODEL, messages=HI, **kw).input_tokens

    base = count()
    assert base > 0
    assert count(tools=TOOLS) > base
    assert (
        count(tools=[{"type": "web_search_20250305", "name": "web_search"}]) == base
    )  # server tools: ignored
    sys_ = count(system="Be brief.")
    billing = {"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=0"}
    assert count(system=[billing, {"type": "text", "text": "Be brief."}]) == sys_ > base
    # a leading role: system message joins the system prompt
    lead = client.messages.count_tokens(
        model=MODEL, system="Be brief.", messages=[{"role": "system", "content": "More."}, *HI]
    ).input_tokens
    assert lead > sys_


def test_tool_use_round_trip_and_continuation(client):
    msgs = [
        *HI,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": True,
                    "content": [{"type": "text", "text": "timeout"}],
                },
                {"type": "text", "text": "and now?"},
            ],
        },
    ]
    m = client.messages.create(
        model=MODEL,
        max_tokens=4,
        messages=msgs,
        tools=TOOLS,
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    )
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")
    fewer = client.messages.count_tokens(model=MODEL, messages=msgs[:2], tools=TOOLS).input_tokens
    assert (
        client.messages.count_tokens(model=MODEL, messages=msgs, tools=TOOLS).input_tokens > fewer
    )
    # a previous response goes back as the assistant turn
    again = client.messages.create(
        model=MODEL, max_tokens=2, messages=[*HI, m.to_param(), {"role": "user", "content": "ok"}]
    )
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens > 0
    for tc in ({"type": "any"}, {"type": "tool", "name": "get_weather"}, {"type": "none"}):
        assert client.messages.create(
            model=MODEL, max_tokens=2, messages=HI, tools=TOOLS, tool_choice=tc
        ).usage


def test_stop_sequences_accepted(client):
    m = client.messages.create(
        model=MODEL,
        max_tokens=4,
        messages=HI,
        stop_sequences=["\n\n", "zz"],
        extra_body={"top_k": 5, "top_p": 0.9, "temperature": 0.5},
    )
    assert m.stop_reason in ("end_turn", "max_tokens", "stop_sequence")
    assert (m.stop_reason == "stop_sequence") == (m.stop_sequence is not None)


def test_thinking_signatures(client, server):
    secret = server.app.state.config.secret
    good = {
        "type": "thinking",
        "thinking": "Let me think.",
        "signature": sign_thinking(secret, "Let me think."),
    }

    def turn(block: dict) -> list[dict]:
        return [
            *HI,
            {"role": "assistant", "content": [block, {"type": "text", "text": "Hello."}]},
            {"role": "user", "content": "more"},
        ]

    m = client.messages.create(
        model=MODEL, max_tokens=2, messages=turn(good), thinking={"type": "adaptive"}
    )
    assert m.usage.output_tokens > 0
    redacted = client.messages.create(
        model=MODEL, max_tokens=2, messages=turn({"type": "redacted_thinking", "data": "x"})
    )
    assert redacted.usage.output_tokens > 0
    # altered: it names this server's key id but does not match (foreign ones: test_foreign_reasoning.py)
    for forged in (
        {**good, "thinking": "Something else."},
        {**good, "signature": sign_thinking(secret, "x")},
    ):
        with pytest.raises(anthropic.BadRequestError) as e:
            client.messages.create(model=MODEL, max_tokens=2, messages=turn(forged))
        assert e.value.body["error"]["type"] == "invalid_request_error"
        assert "messages[1].content[0].signature" in e.value.body["error"]["message"]
    r = post(
        server,
        {"model": MODEL, "max_tokens": 2, "messages": turn({"type": "thinking", "thinking": "t"})},
    )
    assert (
        r.status_code == 400 and "messages[1].content[0].signature" in r.json()["error"]["message"]
    )


@pytest.mark.parametrize(
    "body,field",
    [
        ({"model": MODEL, "messages": HI}, "max_tokens"),
        ({"model": MODEL, "max_tokens": 0, "messages": HI}, "max_tokens"),
        ({"model": MODEL, "max_tokens": 4, "messages": []}, "messages"),
        (
            {"model": MODEL, "max_tokens": 4, "messages": [{"role": "bot", "content": "x"}]},
            "messages[0].role",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 4,
                "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
            },
            "messages[0].content[0]",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 4,
                "messages": [{"role": "user", "content": [{"type": "tool_result"}]}],
            },
            "messages[0].content[0].tool_use_id",
        ),
        ({"model": MODEL, "max_tokens": 4, "messages": HI, "temperature": 1.5}, "temperature"),
        (
            {"model": MODEL, "max_tokens": 4, "messages": HI, "system": [{"type": "image"}]},
            "system[0]",
        ),
        (
            {"model": MODEL, "max_tokens": 4, "messages": HI, "tools": [{"name": "f"}]},
            "tools[0].input_schema",
        ),
        (
            {"model": MODEL, "max_tokens": 4, "messages": HI, "tool_choice": {"type": "maybe"}},
            "tool_choice.type",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 4,
                "messages": HI,
                "tools": TOOLS,
                "tool_choice": {"type": "tool", "name": "nope"},
            },
            "tool_choice",
        ),
        (
            {"model": MODEL, "max_tokens": 4, "messages": HI, "thinking": {"type": "enabled"}},
            "thinking.budget_tokens",
        ),
        (
            {"model": MODEL, "max_tokens": 4, "messages": HI, "stop_sequences": [1]},
            "stop_sequences[0]",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 4,
                "messages": HI,
                "output_config": {"format": {"type": "json_schema"}},
            },
            "output_config.format",
        ),
    ],
)
def test_bad_requests_name_the_field(server, body, field):
    r = post(server, body)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert field in err["error"]["message"]


def test_auth_and_prompt_too_long(client, server):
    bad = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model=MODEL, max_tokens=2, messages=HI)
    assert e.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.count_tokens(model=MODEL, messages=HI)
    long = [{"role": "user", "content": "word " * 5000}]
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=2, messages=long, stream=True)
    assert e.value.body["error"]["message"].startswith("prompt is too long: ")
    assert client.messages.count_tokens(model=MODEL, messages=long).input_tokens > 4096


# ---- blocks and stream with fake generations ------------------------------------------------------


class FakeGen:
    def __init__(self, events, finish="stop", calls=(), stop=None, delay=0.0):
        self.events, self._finish, self.tool_calls, self.stop_sequence = (
            events,
            finish,
            list(calls),
            stop,
        )
        self.prompt_tokens, self.completion_tokens, self.cached_tokens = 10, 5, 4
        self.finish_reason, self.error, self.error_status, self.delay = None, None, 500, delay

    async def __aiter__(self):
        for e in self.events:
            await asyncio.sleep(self.delay)
            yield e
        self.finish_reason = self._finish
        if self._finish == "error":
            self.error = "engine failed"


async def _collect(agen) -> str:
    return "".join([c async for c in agen])


def run_stream(gen, thinking=True, one_call=False, ping_every=10.0):
    w = BlockWriter(b"k", thinking, one_call)
    return sse(asyncio.run(_collect(stream_message(gen, w, "msg_1", "m", ping_every))))


CALL = [Event("tool_call", index=0, name="f", id="call_1"), Event("tool_args", '{"a": 1}', index=0)]
CALLS = [{"id": "call_1", "name": "f", "arguments": '{"a": 1}'}]


def test_stream_thinking_text_tool_blocks():
    evs = [
        Event("reasoning", "hm"),
        Event("reasoning", "m."),
        Event("content", "Hi"),
        *CALL,
        Event("tool_call", index=1, name="g", id="call_2"),
        Event("tool_args", "{}", index=1),
    ]
    events = run_stream(FakeGen(evs, calls=CALLS))
    blocks = check_sequence(events)
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use", "tool_use"]
    assert blocks[0] == {"type": "thinking", "thinking": "", "signature": ""}
    assert blocks[2] == {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    deltas = [(d["index"], d["delta"]["type"]) for n, d in events if n == "content_block_delta"]
    assert deltas == [
        (0, "thinking_delta"),
        (0, "thinking_delta"),
        (0, "signature_delta"),
        (1, "text_delta"),
        (2, "input_json_delta"),
        (3, "input_json_delta"),
    ]
    sig = next(
        d["delta"]["signature"]
        for n, d in events
        if d.get("delta", {}).get("type") == "signature_delta"
    )
    assert sig == sign_thinking(b"k", "hmm.")
    end = events[-2][1]
    assert end["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert end["usage"] == {
        "input_tokens": 6,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
        "output_tokens": 5,
    }


def test_writer_drops_unasked_reasoning_and_parallel_calls():
    w = BlockWriter(b"k", thinking=False, one_call=True)
    evs = [
        Event("reasoning", "secret"),
        Event("content", "Hi"),
        *CALL,
        Event("tool_call", index=1, name="g", id="call_2"),
        Event("tool_args", "{}", index=1),
    ]
    for ev in evs:
        w.feed(ev)
    w.close()
    assert w.content(CALLS) == [
        {"type": "text", "text": "Hi"},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
    ]
    w = BlockWriter(b"k", thinking=True, one_call=False)
    for ev in [Event("reasoning", "a"), Event("content", "b"), Event("reasoning", "c")]:
        w.feed(ev)
    w.close()
    th = [b for b in w.content([]) if b["type"] == "thinking"]
    assert [b["signature"] for b in th] == [sign_thinking(b"k", "a"), sign_thinking(b"k", "c")]


def test_stream_stop_reasons_and_error():
    assert (
        run_stream(FakeGen([Event("content", "x")], finish="length"))[-2][1]["delta"]["stop_reason"]
        == "max_tokens"
    )
    delta = run_stream(FakeGen([Event("content", "x")], stop="END"))[-2][1]["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    events = run_stream(FakeGen([Event("content", "x")], finish="error"))
    assert events[-1] == (
        "error",
        {"type": "error", "error": {"type": "api_error", "message": "engine failed"}},
    )
    assert "message_stop" not in [n for n, _ in events]


def test_pings_while_waiting():
    events = run_stream(
        FakeGen([Event("content", "x"), Event("content", "y")], delay=0.12), ping_every=0.05
    )
    check_sequence(events)
    assert [n for n, _ in events[2:-2]].count("ping") >= 2

    closed = []

    async def slow():
        try:
            await asyncio.sleep(10)
            yield 1
        finally:
            closed.append(True)

    async def first_two():
        agen = paced(slow(), 0.01)
        got = [await agen.__anext__(), await agen.__anext__()]
        await agen.aclose()
        return got

    assert asyncio.run(first_two()) == [None, None] and closed == [True]
