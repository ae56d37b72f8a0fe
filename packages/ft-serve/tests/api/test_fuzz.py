"""Fuzz every POST endpoint of a real server on loopback with hypothesis-generated bodies.

Bodies start from a valid request of the endpoint and get random edits: a known field (top level or
inside the first message / input item) set to an arbitrary JSON value or removed, an unknown field
added, or the whole body replaced by arbitrary JSON. Every answer must be a 2xx (a stream read to its
end) or a 4xx in the schema of the API that was called: never a 5xx, never a hang. After each
endpoint's batch a normal request must still be answered.
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ft_core import Engine
from serve_helpers import API_KEY, start_server

CHAT_MSG = {"role": "user", "content": "Hi"}
BASES = {
    "/v1/chat/completions": {"model": "ft-test", "messages": [CHAT_MSG], "max_tokens": 4},
    "/v1/completions": {"model": "ft-test", "prompt": "Hi", "max_tokens": 4},
    "/v1/responses": {"model": "ft-test", "input": "Hi", "max_output_tokens": 16},
    "/v1/responses/compact": {"model": "ft-test", "input": [{"role": "user", "content": "Hi"}]},
    "/v1/messages": {"model": "ft-test", "max_tokens": 4, "messages": [CHAT_MSG]},
    "/v1/messages/count_tokens": {"model": "ft-test", "messages": [CHAT_MSG]},
    "/v1/admin/memory": {"kv": "8MiB"},
}
# Fields each endpoint reads (from the API references), so that edits hit the validation code.
FIELDS = {
    "/v1/chat/completions": [
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "n",
        "stream",
        "stream_options",
        "stop",
        "seed",
        "tools",
        "tool_choice",
        "response_format",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "presence_penalty",
        "frequency_penalty",
        "reasoning_effort",
        "chat_template_kwargs",
        "parallel_tool_calls",
        "user",
        "ignore_eos",
    ],
    "/v1/completions": [
        "model",
        "prompt",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stream",
        "stop",
        "seed",
        "echo",
        "logprobs",
        "suffix",
        "best_of",
        "logit_bias",
        "ignore_eos",
    ],
    "/v1/responses": [
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "stream",
        "tools",
        "tool_choice",
        "text",
        "reasoning",
        "include",
        "store",
        "previous_response_id",
        "parallel_tool_calls",
        "truncation",
        "metadata",
    ],
    "/v1/responses/compact": [
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "text",
        "stream",
        "reasoning",
    ],
    "/v1/messages": [
        "model",
        "messages",
        "max_tokens",
        "system",
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "stop_sequences",
        "tools",
        "tool_choice",
        "thinking",
        "metadata",
        "ignore_eos",
    ],
    "/v1/messages/count_tokens": [
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
    ],
    "/v1/admin/memory": ["total", "kv", "experts", "states", "reason"],
}
ITEM_FIELDS = [
    "role",
    "content",
    "type",
    "name",
    "tool_calls",
    "tool_call_id",
    "text",
    "id",
    "call_id",
    "arguments",
    "output",
    "signature",
    "thinking",
    "encrypted_content",
]

# Values the validators get wrong most often: out-of-range numbers, wrong types, empty containers.
edges = st.sampled_from(
    [
        2**63,
        2**64,
        -(2**63) - 1,
        10**30,
        -1,
        0,
        1,
        1.5,
        1e9,
        1e30,
        float("nan"),
        float("inf"),
        True,
        "",
        "\ud800",
        "a" * 300,
        "auto",
        "none",
        "required",
        "user",
        "tool",
        [],
        {},
        [None],
        [""],
        ["a", "b", "c", "d", "e"],
        {"type": "function"},
        {"name": ""},
        {"tools": 1},
        {"add_generation_prompt": False},
        {"type": "json_schema"},
        {"1": 500},
        {"include_usage": True},
    ]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-3, 20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
values = edges | st.recursive(
    scalars | edges,
    lambda c: (
        st.lists(c, max_size=3)
        | st.dictionaries(st.sampled_from(ITEM_FIELDS) | st.text(max_size=6), c, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def bodies(draw, path):
    """A body for ``path``: the valid base with 1-3 random edits, or (rarely) arbitrary JSON."""
    if draw(st.integers(0, 9)) == 0:
        return draw(values)
    body = json.loads(json.dumps(BASES[path]))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "drop", "item", "extra"]))
        key = draw(st.sampled_from(FIELDS[path]))
        if op == "set":
            body[key] = draw(values)
        elif op == "drop":
            body.pop(key, None)
        elif op == "extra":
            body[draw(st.text(min_size=1, max_size=8))] = draw(values)
        else:
            items = next(
                (body[k] for k in ("messages", "input") if isinstance(body.get(k), list)), None
            )
            if items and isinstance(items[0], dict):
                items[0] = dict(items[0])
                items[0][draw(st.sampled_from(ITEM_FIELDS))] = draw(values)
    return body


def _check(path: str, r: httpx.Response) -> None:
    assert r.status_code < 500, (path, r.status_code, r.text[:500])
    if r.status_code < 300:
        return
    assert 400 <= r.status_code < 500, (path, r.status_code)
    err = r.json()
    if path.startswith("/v1/messages"):
        assert err["type"] == "error" and isinstance(err["error"]["message"], str), err
        assert isinstance(err["error"]["type"], str), err
    else:
        assert isinstance(err["error"]["message"], str) and isinstance(err["error"]["type"], str), (
            err
        )


@pytest.fixture(scope="module")
def fuzz_server():
    """Its own engine and server: a short context bounds what a valid-but-huge request may generate."""
    s = start_server(Engine.from_pretrained(None, max_model_len=256), api_key=API_KEY)
    yield s
    s.stop()


def _post(client: httpx.Client, path: str, body) -> httpx.Response:
    data = json.dumps(body, ensure_ascii=True).encode()  # lone surrogates travel as \ud800 escapes
    with client.stream("POST", path, content=data) as r:
        r.read()  # a stream is read to its end: a hang fails the test through the client's timeout
    return r


def _normal_request_is_answered(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", json=BASES["/v1/chat/completions"])
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant", r.text


@pytest.mark.parametrize("path", list(BASES))
def test_fuzzed_bodies_get_2xx_or_4xx(fuzz_server, path):
    headers = {"authorization": f"Bearer {API_KEY}", "content-type": "application/json"}
    with httpx.Client(base_url=fuzz_server.url, headers=headers, timeout=60) as client:

        @settings(
            max_examples=120,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(bodies(path))
        def run(body):
            _check(path, _post(client, path, body))

        run()
        _normal_request_is_answered(client)
