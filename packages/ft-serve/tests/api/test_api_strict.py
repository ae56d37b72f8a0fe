"""Requests the real OpenAI / Anthropic APIs refuse are refused here too: a 400 in the API's own
error schema that names the field (issue 14, defects 2 and 3), through a real server on loopback."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from serve_helpers import API_KEY, start_server

U = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": U, "max_tokens": 2}
CMPL = {"model": "m", "prompt": "hi", "max_tokens": 2}
RESP = {"model": "m", "input": "hi", "max_output_tokens": 16}
ANTH = {"model": "m", "messages": U, "max_tokens": 2}
OBJ = {"type": "object", "properties": {}}
FN = {"type": "function", "function": {"name": "f", "parameters": OBJ}}
RFN = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
ATOOL = {"name": "f", "input_schema": {"type": "object", "properties": {}}}
CH, CO, RE, CP = "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/responses/compact"
ME, CT = "/v1/messages", "/v1/messages/count_tokens"
BIG = 18446744073709551616  # 2**64: outside int64


def fn(name="f", parameters=None):
    return {"type": "function", "function": {"name": name, "parameters": parameters or OBJ}}


# (path, body, param the error names: exact for OpenAI; a substring of the message for Anthropic)
CASES = [
    # chat: messages
    (CH, {**CHAT, "messages": [{"role": "user"}]}, "messages[0].content"),
    (CH, {**CHAT, "messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    (
        CH,
        {**CHAT, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "messages[0].content[0].text",
    ),
    (CH, {**CHAT, "messages": U + [{"role": "tool", "content": "x"}]}, "messages[1].tool_call_id"),
    (CH, {k: v for k, v in CHAT.items() if k != "model"}, "model"),
    # chat: sampling and options
    (CH, {**CHAT, "top_logprobs": 2}, "top_logprobs"),
    (CH, {**CHAT, "logit_bias": {"5": 101}}, "logit_bias.5"),
    (CH, {**CHAT, "logit_bias": {"a": 1}}, "logit_bias.a"),
    (CH, {**CHAT, "logit_bias": [1]}, "logit_bias"),
    (CH, {**CHAT, "logit_bias": {"5": 3}}, "logit_bias"),
    (CH, {**CHAT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    (CH, {**CHAT, "stream_options": {"include_usage": True}}, "stream_options"),
    (CH, {**CHAT, "reasoning_effort": "bogus"}, "reasoning_effort"),
    (CH, {**CHAT, "seed": BIG}, "seed"),
    (CH, {**CHAT, "max_tokens": 10**9}, "max_tokens"),
    (CH, {**CHAT, "max_tokens": 10**30}, "max_tokens"),
    (CH, {**CHAT, "max_tokens": None, "max_completion_tokens": 10**9}, "max_completion_tokens"),
    (CH, {**CHAT, "temperature": float("nan")}, "temperature"),
    (
        CH,
        {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
        "response_format.json_schema.name",
    ),
    (CH, {**CHAT, "chat_template_kwargs": {"tools": 1}}, "chat_template_kwargs.tools"),
    (
        CH,
        {**CHAT, "chat_template_kwargs": {"add_generation_prompt": False}},
        "chat_template_kwargs.add_generation_prompt",
    ),
    # chat: tools
    (CH, {**CHAT, "tools": [FN, FN]}, "tools[1].function.name"),
    (CH, {**CHAT, "tools": [fn("")]}, "tools[0].function.name"),
    (CH, {**CHAT, "tools": [fn("a" * 65)]}, "tools[0].function.name"),
    (CH, {**CHAT, "tools": [fn("two words")]}, "tools[0].function.name"),
    (
        CH,
        {**CHAT, "tools": [fn(parameters={"type": "string"})]},
        "tools[0].function.parameters.type",
    ),
    (
        CH,
        {**CHAT, "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]},
        "tools[0].function.parameters",
    ),
    # completions
    (CO, {k: v for k, v in CMPL.items() if k != "model"}, "model"),
    (CO, {**CMPL, "seed": -BIG}, "seed"),
    (CO, {**CMPL, "max_tokens": 10**9}, "max_tokens"),
    (CO, {**CMPL, "stream_options": {"include_usage": True}}, "stream_options"),
    (CO, {**CMPL, "stop": ["a"] * 5}, "stop"),
    (CO, {**CMPL, "prompt": ["hi"] * 300}, "prompt"),
    # responses
    (RE, {**RESP, "max_output_tokens": 15}, "max_output_tokens"),
    (RE, {**RESP, "max_output_tokens": 10**9}, "max_output_tokens"),
    (RE, {**RESP, "seed": BIG}, "seed"),
    (RE, {**RESP, "tools": [{"type": "bogus"}]}, "tools[0].type"),
    (RE, {**RESP, "tools": [RFN, RFN]}, "tools[1].name"),
    (RE, {**RESP, "tools": [{**RFN, "name": "a b"}]}, "tools[0].name"),
    (RE, {**RESP, "tools": [{**RFN, "parameters": []}]}, "tools[0].parameters"),
    (RE, {**RESP, "include": ["bogus"]}, "include[0]"),
    (RE, {**RESP, "reasoning": {"effort": "bogus"}}, "reasoning.effort"),
    (RE, {**RESP, "text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name"),
    # responses/compact: checked as a response is
    (CP, {**RESP, "stream": "yes"}, "stream"),
    (CP, {**RESP, "tool_choice": "required"}, "tool_choice"),
    (CP, {**RESP, "tools": [RFN], "tool_choice": {"type": "function", "name": "g"}}, "tool_choice"),
    (CP, {**RESP, "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    (CP, {"input": "hi"}, "model"),
    # anthropic messages
    (ME, {k: v for k, v in ANTH.items() if k != "model"}, "model"),
    (ME, {**ANTH, "messages": [{"role": "user", "content": ""}]}, "messages[0].content"),
    (ME, {**ANTH, "messages": [{"role": "user", "content": []}]}, "messages[0].content"),
    (
        ME,
        {**ANTH, "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 2048}},
        "thinking.budget_tokens",
    ),
    (
        ME,
        {**ANTH, "thinking": {"type": "enabled", "budget_tokens": 1000}},
        "thinking.budget_tokens",
    ),
    (ME, {**ANTH, "stop_sequences": "x"}, "stop_sequences"),
    (ME, {**ANTH, "max_tokens": 10**9}, "max_tokens"),
    (ME, {**ANTH, "tools": [{**ATOOL, "name": "a" * 129}]}, "tools[0].name"),
    (ME, {**ANTH, "tools": [{**ATOOL, "name": "a.b"}]}, "tools[0].name"),
    (
        ME,
        {**ANTH, "tools": [{"name": "f", "input_schema": {"properties": {}}}]},
        "tools[0].input_schema",
    ),
    (CT, {"messages": U}, "model"),
]


def _id(case) -> str:
    return f"{case[0].removeprefix('/v1/')}:{case[2]}"


@pytest.fixture(scope="module")
def http(server):
    auth = {"authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=30) as c:
        yield c


@pytest.mark.parametrize("path,body,param", CASES, ids=[_id(c) for c in CASES])
def test_refused_with_400_naming_the_field(http, path, body, param):
    r = http.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()
    if path.startswith("/v1/messages"):
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
        assert param in err["error"]["message"], err
    else:
        assert err["error"]["type"] == "invalid_request_error", err
        assert err["error"]["param"] == param, err


# Shapes the real clients send that must stay accepted (OpenAI allows assistant content null with
# tool_calls; Anthropic allows a budget below max_tokens and an empty final assistant turn).
ACCEPTED = [
    (
        CH,
        {
            **CHAT,
            "messages": U
            + [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            ],
            "tools": [FN],
        },
    ),
    (
        CH,
        {
            **CHAT,
            "logit_bias": {},
            "seed": (1 << 63) - 1,
            "stop": ["a"] * 4,
            "reasoning_effort": "low",
            "chat_template_kwargs": {"enable_thinking": False},
        },
    ),
    (CH, {**CHAT, "stream": True, "stream_options": {"include_usage": True}}),
    (
        RE,
        {
            **RESP,
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "minimal"},
            "tools": [RFN, {"type": "web_search"}],
        },
    ),
    (
        ME,
        {
            **ANTH,
            "max_tokens": 1100,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "stop_sequences": ["x"],
            "tools": [ATOOL],
            "ignore_eos": True,
        },
    ),
    (ME, {**ANTH, "messages": U + [{"role": "assistant", "content": []}, *U]}),
]


@pytest.mark.parametrize("path,body", ACCEPTED, ids=[a[0].removeprefix("/v1/") for a in ACCEPTED])
def test_valid_shapes_still_accepted(http, path, body):
    r = http.post(path, json=body)
    assert r.status_code == 200, r.text


def test_prompt_plus_max_tokens_past_the_context(http, server):
    n = server.app.state.service.max_model_len
    r = http.post(CH, json={**CHAT, "max_tokens": n})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens", r.text
    assert r.json()["error"]["code"] == "context_length_exceeded"
    r = http.post(ME, json={**ANTH, "max_tokens": n})  # Anthropic: accepted, stops at the end
    assert r.status_code == 200, r.text


def test_messages_honours_ignore_eos(demo_engine):
    """``ignore_eos`` on /v1/messages: the reply runs to max_tokens even where EOS is likely."""
    s = start_server(demo_engine, model_name="m")
    try:
        body = {**ANTH, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        r = httpx.post(s.url + "/v1/messages", json=body, timeout=60).json()
        assert r["usage"]["output_tokens"] == 24 and r["stop_reason"] == "max_tokens", r
    finally:
        s.stop()


def test_official_sdks_raise_bad_request(server):
    oa = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(model="m", messages=U, max_tokens=2, stop=list("abcde"))
    assert e.value.body["param"] == "stop"
    with pytest.raises(openai.BadRequestError) as e:
        oa.responses.create(model="m", input="hi", include=["bogus"])
    assert e.value.body["param"] == "include[0]"
    an = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as e:
        an.messages.create(
            model="m",
            max_tokens=2048,
            messages=[{"role": "user", "content": "hi"}],
            thinking={"type": "enabled", "budget_tokens": 4096},
        )
    assert "thinking.budget_tokens" in str(e.value)


def test_a_batch_past_the_queue_limit_is_refused_whole(demo_engine):
    """More prompts than --max-waiting-requests: a 400 naming the limit, nothing left running."""
    s = start_server(demo_engine, model_name="m", max_waiting_requests=4, max_running_requests=1)
    try:
        r = httpx.post(s.url + "/v1/completions", json={**CMPL, "prompt": ["hi"] * 5}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text
        assert "max-waiting-requests" in r.json()["error"]["message"]
        loop = s.app.state.service.loop
        assert loop.running == 0 and loop.waiting == 0
    finally:
        s.stop()
