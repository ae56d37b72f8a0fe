"""OpenAI Chat Completions / Completions / models against a real server, driven by the official SDK."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import openai
import pytest

from serve_helpers import API_KEY, start_server
from ft_core import Engine


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


def chat(client, content="Hello there", **kw):
    kw.setdefault("max_tokens", 8)
    return client.chat.completions.create(
        model="ft-test", messages=[{"role": "user", "content": content}], **kw
    )


def test_models_report_context_length(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == ["ft-test"]
    assert models[0].model_extra["context_length"] == server.app.state.service.max_model_len > 0


def test_chat_non_streaming_has_usage(client):
    r = chat(client, max_tokens=6, temperature=0)
    c = r.choices[0]
    assert r.object == "chat.completion" and c.message.role == "assistant"
    assert c.finish_reason in ("stop", "length") and isinstance(c.message.content, str)
    u = r.usage
    assert (
        u.prompt_tokens > 0
        and 1 <= u.completion_tokens <= 6
        and u.total_tokens == u.prompt_tokens + u.completion_tokens
    )
    assert u.prompt_tokens_details.cached_tokens >= 0


def test_chat_streaming_chunks_and_usage(client):
    chunks = list(
        chat(
            client, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1
    # Greedy streaming and non-streaming produce the same text.
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat(client, max_tokens=6, temperature=0).choices[0].message.content


def test_chat_seed_is_reproducible(client):
    a = chat(client, max_tokens=8, temperature=1.0, seed=7).choices[0].message.content
    b = chat(client, max_tokens=8, temperature=1.0, seed=7).choices[0].message.content
    assert a == b


def test_agent_shaped_bodies_are_accepted(client):
    """DESIGN §6: OpenCode / OpenClaw bodies: tools, echoed reasoning_content, empty content beside
    tool_calls, tool results, max_completion_tokens, developer role, chat_template_kwargs."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ]
    messages = [
        {"role": "developer", "content": "You are a coding agent."},
        {"role": "user", "content": [{"type": "text", "text": "Open README.md"}]},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should read it.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "README.md"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "# ft"},
    ]
    for tc in ("auto", "none", "required", {"type": "function", "function": {"name": "read_file"}}):
        r = client.chat.completions.create(
            model="ft-test",
            messages=messages,
            tools=tools,
            tool_choice=tc,
            parallel_tool_calls=True,
            max_completion_tokens=8,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        c = r.choices[0]
        assert (
            c.finish_reason in ("stop", "length", "tool_calls") and r.usage.completion_tokens >= 1
        )
        if c.message.tool_calls:  # a call, when parsed, is complete and valid
            assert c.message.tool_calls[0].function.name == "read_file"


def test_completions_text_and_token_prompts(client):
    r = client.completions.create(
        model="ft-test", prompt="The expert cache", max_tokens=5, temperature=0
    )
    assert r.object == "text_completion" and r.usage.completion_tokens >= 1
    ids = [5, 6, 7, 8]
    r2 = client.completions.create(
        model="ft-test", prompt=ids, max_tokens=3, temperature=0, echo=True
    )
    assert r2.usage.prompt_tokens == 4
    chunks = list(
        client.completions.create(
            model="ft-test", prompt="The expert cache", max_tokens=5, temperature=0, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    batch = client.completions.create(
        model="ft-test", prompt=["a b", "c d"], max_tokens=2, temperature=0
    )
    assert sorted(c.index for c in batch.choices) == [0, 1]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
            "temperature",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            "max_tokens",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": "sometimes",
            },
            "tool_choice",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ],
            },
            "messages[0].content[0]",
        ),
    ],
)
def test_bad_requests_name_the_field(server, body, param):
    r = httpx.post(
        server.url + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {API_KEY}"},
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (
        err["type"] == "invalid_request_error"
        and err["param"] == param
        and param.split("[")[0] in err["message"]
    )


def test_errors_in_openai_schema(client, server):
    h = {"authorization": f"Bearer {API_KEY}"}
    r = httpx.post(
        server.url + "/v1/chat/completions",
        content=b"{not json",
        headers={**h, "content-type": "application/json"},
    )
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = httpx.get(server.url + "/v1/nothing-here", headers=h)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, content="word " * (server.app.state.service.max_model_len + 10))
    assert e.value.code == "context_length_exceeded"


def test_health_root_and_metrics(server, client):
    chat(client, max_tokens=3)
    assert httpx.head(server.url + "/").status_code == 200
    assert httpx.get(server.url + "/").status_code == 200
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    text = httpx.get(server.url + "/metrics", headers={"authorization": f"Bearer {API_KEY}"}).text
    for name in (
        "ft_requests_total",
        "ft_time_to_first_token_seconds_bucket",
        "ft_time_per_output_token_seconds_bucket",
        "ft_prompt_tokens_total",
        "ft_generation_tokens_total",
        "ft_num_requests_waiting",
        "ft_num_requests_running",
        "ft_prefix_cache_hit_tokens_total",
        "ft_expert_cache_hits_total",
    ):
        assert name in text, name


def test_two_streams_interleave(server):
    """Continuous batching: a second stream starts producing while the first is still streaming.

    The second request is sent once the first has streamed a token (not after a fixed delay: the
    demo model can finish a short stream in tens of milliseconds), and the first still has hundreds
    of decode steps to go, so the second is admitted into the running batch well before it ends.
    """

    async def run():
        ac = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)
        log, a_started = [], asyncio.Event()

        async def one(tag, max_tokens, after=None):
            if after is not None:
                await after.wait()
            s = await ac.chat.completions.create(
                model="ft-test",
                messages=[{"role": "user", "content": f"stream {tag}"}],
                max_tokens=max_tokens,
                temperature=0,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            async for c in s:
                if c.choices and c.choices[0].delta.content:
                    log.append(tag)
                    if tag == "a":
                        a_started.set()

        await asyncio.gather(one("a", 512), one("b", 8, after=a_started))
        await ac.close()
        return log

    log = asyncio.run(run())
    first_b, last_a = log.index("b"), len(log) - 1 - log[::-1].index("a")
    assert first_b < last_a, "the second stream only started after the first ended"


def test_cancelled_stream_frees_its_pages(server):
    loop = server.app.state.loop
    eng = loop.engine
    with httpx.stream(
        "POST",
        server.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {API_KEY}"},
        json={
            "model": "m",
            "messages": [{"role": "user", "content": "go on forever"}],
            "stream": True,
            "ignore_eos": True,
        },
    ) as r:  # no max_tokens: to the end of the context
        for i, _ in enumerate(r.iter_lines()):
            if i > 6:
                break
        assert loop.running == 1
    deadline = time.time() + 10
    while (loop.running or eng.kv.tables) and time.time() < deadline:
        time.sleep(0.05)
    assert loop.running == 0 and not eng.kv.tables, "the aborted request still holds pages"


def test_second_turn_reuses_the_first_turns_prefix(client):
    msgs = [
        {"role": "system", "content": "You are terse. " * 20},
        {"role": "user", "content": "first question " * 8},
    ]
    r1 = client.chat.completions.create(
        model="ft-test", messages=msgs, max_tokens=12, temperature=0
    )
    msgs += [
        {"role": "assistant", "content": r1.choices[0].message.content},
        {"role": "user", "content": "and then?"},
    ]
    r2 = client.chat.completions.create(model="ft-test", messages=msgs, max_tokens=4, temperature=0)
    assert r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens // 2


def test_only_requests_count_as_waiting():
    """The waiting limit counts queued requests, not the aborts of disconnected clients or admin calls
    on their way to the engine thread (the loop thread is not started: nothing drains the queue)."""
    from ft_core import SamplingParams
    from ft_serve.server.engine_loop import EngineLoop
    from ft_serve.server.handoff import Request
    from ft_serve.server.errors import ApiError

    loop = EngineLoop(Engine.from_pretrained(None), max_running=1, max_waiting=1)

    async def go():
        for _ in range(3):
            loop.abort(Request([1], SamplingParams(), asyncio.get_running_loop()))
        loop.call(lambda eng: None)
        assert loop.waiting == 0
        loop.submit([1, 2], SamplingParams())
        assert loop.waiting == 1
        with pytest.raises(ApiError) as e:
            loop.submit([1, 2], SamplingParams())
        assert e.value.status == 503 and "1 requests waiting (limit 1)" in e.value.message

    asyncio.run(go())


def test_queue_full_is_503():
    eng = Engine.from_pretrained(None)
    s = start_server(eng, max_running_requests=1, max_waiting_requests=1)
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        body = dict(
            model="m",
            messages=[{"role": "user", "content": "hold"}],
            max_tokens=400,
            extra_body={"ignore_eos": True},
        )
        first = c.chat.completions.create(stream=True, **body)
        next(
            iter(first)
        )  # (the first chunk may come before the engine thread admitted the request)
        deadline = time.time() + 10
        while s.app.state.loop.running < 1 and time.time() < deadline:
            time.sleep(0.01)
        waiter = threading.Thread(target=lambda: c.chat.completions.create(**body), daemon=True)
        waiter.start()
        while s.app.state.loop.waiting < 1 and time.time() < deadline:
            time.sleep(0.01)
        with pytest.raises(openai.InternalServerError) as e:
            c.chat.completions.create(**body)
        assert e.value.status_code == 503 and "busy" in e.value.message
        first.close()
    finally:
        s.stop()
