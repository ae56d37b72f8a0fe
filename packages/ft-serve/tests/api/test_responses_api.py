"""OpenAI Responses API (/v1/responses, /v1/responses/compact) against a real server, driven by the
official SDK the way Codex drives it (DESIGN §6), plus unit tests of the item and event mapping.
The demo model's text is gibberish: these tests check structure, events, usage and errors."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from ft_serve.api.responses_items import convert_input
from ft_serve.api.responses_tools import build_tools, flat_name
from ft_serve.api.signing import seal
from ft_serve.api.responses_output import OutputBuilder
from ft_serve.parsers import Event
from serve_helpers import API_KEY

M = "ft-test"
NS_TOOLS = [
    {
        "type": "function",
        "name": "shell_command",
        "description": "Run a shell command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
        "strict": False,
    },
    {
        "type": "namespace",
        "name": "mcp__github__",
        "description": "GitHub MCP server",
        "tools": [
            {
                "type": "function",
                "name": "create_issue",
                "description": "Open an issue",
                "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
                "strict": False,
            }
        ],
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Apply a patch",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
    },
    {"type": "local_shell"},
    {"type": "web_search", "external_web_access": False},
]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="module")
def secret(server):
    return server.app.state.config.secret


def _bad(client, param: str, **kw) -> openai.BadRequestError:
    kw.setdefault("input", "hi")
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=M, max_output_tokens=16, **kw)
    assert e.value.body["param"] == param, e.value.body
    return e.value


def _check_usage(u) -> None:
    assert (
        u.input_tokens > 0
        and u.output_tokens >= 1
        and u.total_tokens == u.input_tokens + u.output_tokens
    )
    assert (
        u.input_tokens_details.cached_tokens >= 0 and u.output_tokens_details.reasoning_tokens >= 0
    )


# ---- the wire -----------------------------------------------------------------------------------
def test_non_streaming_response(client):
    r = client.responses.create(model=M, input="Hello there", max_output_tokens=16, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == M and r.error is None
    assert r.status in ("completed", "incomplete") and r.max_output_tokens == 16 and r.store is True
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output and {o.type for o in r.output} <= {"message", "reasoning", "function_call"}
    for o in r.output:
        if o.type == "message":
            assert (
                o.role == "assistant"
                and o.id.startswith("msg_")
                and o.content[0].type == "output_text"
            )
    _check_usage(r.usage)
    assert 1 <= r.usage.output_tokens <= 16


def test_streaming_events_in_order(client):
    events = list(
        client.responses.create(
            model=M, input="Hello there", max_output_tokens=16, temperature=0, stream=True
        )
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert final.response.status == final.type.split(".")[1]
    _check_usage(final.response.usage)
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [o.id for o in final.response.output] == [o.id for o in done]
    for i, item in enumerate(done):  # per item: added, then its deltas, then done
        mine = [e for e in events if getattr(e, "output_index", None) == i]
        assert (
            mine[0].type == "response.output_item.added"
            and mine[-1].type == "response.output_item.done"
        )
        if item.type == "message":
            deltas = "".join(e.delta for e in mine if e.type == "response.output_text.delta")
            assert deltas == item.content[0].text
    # greedy streaming and non-streaming produce the same text
    again = client.responses.create(
        model=M, input="Hello there", max_output_tokens=16, temperature=0
    )
    assert again.output_text == final.response.output_text


def test_codex_shaped_request(client):
    """What Codex sends: instructions, developer/user/assistant items, namespace / custom / hosted tools,
    store false, include encrypted reasoning, prompt_cache_key, reasoning, text verbosity, streaming."""
    input_items = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "<permissions>on</permissions>"}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "<environment_context/>"}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "List the files."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Sure."}],
        },
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Go on."},
    ]
    events = list(
        client.responses.create(
            model=M,
            instructions="You are Codex.",
            input=input_items,
            tools=NS_TOOLS,
            tool_choice="auto",
            parallel_tool_calls=False,
            reasoning={"effort": "medium", "summary": "auto"},
            store=False,
            stream=True,
            include=["reasoning.encrypted_content"],
            prompt_cache_key="thread-1",
            text={"verbosity": "low"},
            max_output_tokens=16,
            metadata={"k": "v"},
            service_tier="auto",
            user="u1",
            truncation="disabled",
        )
    )
    r = events[-1].response
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert r.store is False and r.prompt_cache_key == "thread-1" and r.metadata == {"k": "v"}
    assert (
        len(r.tools) == len(NS_TOOLS)
        and r.parallel_tool_calls is False
        and r.instructions == "You are Codex."
    )
    for o in r.output:
        if o.type == "reasoning":
            assert o.encrypted_content  # include asked for it


def test_tool_round_trip_and_reasoning_accepted(client, secret):
    """function_call (namespaced) / custom / local shell calls with their outputs, and a reasoning item
    whose encrypted_content this server issued, come back in input and are accepted."""
    b = OutputBuilder(build_tools(NS_TOOLS), secret, encrypted=True)
    b.feed(Event("reasoning", "I will open an issue."))
    b.finish()
    reasoning = b.output[0]
    items = [
        {"role": "user", "content": "File a bug and patch it."},
        reasoning,
        {
            "type": "function_call",
            "name": "create_issue",
            "namespace": "mcp__github__",
            "arguments": '{"title": "x"}',
            "call_id": "call_1",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "issue #1"},
        {
            "type": "custom_tool_call",
            "name": "apply_patch",
            "input": "*** Begin Patch",
            "call_id": "call_2",
        },
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done!"},
        {
            "type": "local_shell_call",
            "call_id": "call_3",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "working_directory": "/tmp"},
        },
        {
            "type": "function_call_output",
            "call_id": "call_3",
            "output": [
                {"type": "input_text", "text": "a.txt"},
                {"type": "input_image", "image_url": "data:,"},
            ],
        },
        {
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        },
    ]
    r = client.responses.create(
        model=M,
        input=items,
        tools=NS_TOOLS,
        max_output_tokens=16,
        tool_choice={"type": "function", "name": "create_issue", "namespace": "mcp__github__"},
    )
    assert r.status in ("completed", "incomplete")
    _check_usage(r.usage)


def test_tampered_encrypted_content_is_refused(client, secret):
    """A token naming this server's key id that does not verify, or of the wrong kind, is a 400 (tokens
    from elsewhere are accepted as foreign: test_foreign_reasoning.py)."""
    v, kid, _, mac = seal(secret, "reasoning", "secret plan").split(".")
    forged = ".".join([v, kid, seal(secret, "reasoning", "another plan").split(".")[2], mac])
    for bad in (forged, seal(secret, "reasoning", "x")[:-2], seal(secret, "compaction", "x")):
        e = _bad(
            client,
            "input[1].encrypted_content",
            input=[
                {"role": "user", "content": "hi"},
                {"type": "reasoning", "summary": [], "encrypted_content": bad},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "again"},
            ],
        )
        assert e.body["code"] == "invalid_encrypted_content"


def test_cached_tokens_on_a_repeated_prefix(client):
    long_input = [{"role": "user", "content": " ".join(f"word{i}" for i in range(300))}]
    first = client.responses.create(
        model=M, input=long_input, max_output_tokens=16, prompt_cache_key="k"
    )
    second = client.responses.create(
        model=M, input=long_input, max_output_tokens=16, prompt_cache_key="k"
    )
    assert second.usage.input_tokens == first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0


def test_bad_key_is_an_authentication_error(server):
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.responses.create(model=M, input="hi", max_output_tokens=16)


def test_malformed_requests_name_the_field(client):
    _bad(
        client,
        "input[0].call_id",
        input=[{"type": "function_call", "name": "f", "arguments": "{}"}],
    )
    _bad(client, "input[0].role", input=[{"type": "message", "role": "robot", "content": "hi"}])
    _bad(client, "input[0].type", input=[{"type": "bogus_item"}])
    _bad(client, "input[0].type", input=[{"content": "no role, no type"}])
    _bad(
        client,
        "input[0].content[0]",
        input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
    )
    _bad(
        client,
        "input[1].output",
        input=[
            {"role": "user", "content": "x"},
            {"type": "function_call_output", "call_id": "c", "output": 3},
        ],
    )
    _bad(client, "input", input=[])
    _bad(client, "tools[1].tools", tools=[NS_TOOLS[0], {"type": "namespace", "name": "ns"}])
    _bad(client, "tools[1].name", tools=[NS_TOOLS[0], NS_TOOLS[0]])  # the same name twice
    _bad(client, "tool_choice", tool_choice={"type": "web_search"})
    _bad(client, "tool_choice", tools=NS_TOOLS, tool_choice={"type": "function", "name": "nope"})
    e = _bad(client, "previous_response_id", previous_response_id="resp_1")
    assert "input" in e.body["message"]
    _bad(
        client, "input[0]", input=[{"type": "compaction_trigger"}, {"role": "user", "content": "x"}]
    )
    _bad(client, "text.format.type", text={"format": {"type": "xml"}})


def test_json_schema_format_is_accepted(client):
    r = client.responses.create(
        model=M,
        input="Give me JSON",
        max_output_tokens=16,
        text={
            "format": {
                "type": "json_schema",
                "name": "out",
                "schema": {"type": "object"},
                "strict": True,
            }
        },
    )
    assert r.text.format.type == "json_schema"


def test_over_long_input_is_a_400(client, server):
    n = server.app.state.service.max_model_len
    e = _bad(client, "input", input=" ".join(["word"] * (n + 10)))
    assert e.body["code"] == "context_length_exceeded"


# ---- compaction ---------------------------------------------------------------------------------
HISTORY = [
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Fix the bug in a.py"}],
    },
    {
        "type": "function_call",
        "name": "shell_command",
        "arguments": '{"command": "cat a.py"}',
        "call_id": "c1",
    },
    {"type": "function_call_output", "call_id": "c1", "output": "print(1/0)"},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Found it."}],
    },
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Now add a test"}],
    },
]


def test_compact_endpoint(client, secret):
    r = client.responses.compact(
        model=M,
        input=HISTORY,
        instructions="You are Codex.",
        extra_body={"tools": NS_TOOLS, "max_output_tokens": 16},
    )
    assert r.object == "response.compaction" and r.id.startswith("resp_")
    *users, last = r.output
    assert last.type == "compaction" and last.encrypted_content.startswith("ft2.")
    assert [u.content[0].text for u in users] == ["Fix the bug in a.py", "Now add a test"]
    _check_usage(r.usage)
    # the compacted history is the next turn's input
    nxt = [o.model_dump(exclude_none=True, warnings=False) for o in r.output] + [
        {"role": "user", "content": "continue"}
    ]
    r2 = client.responses.create(model=M, input=nxt, max_output_tokens=16, tools=NS_TOOLS)
    assert r2.status in ("completed", "incomplete")
    nxt[-2]["encrypted_content"] = seal(secret, "reasoning", "not a summary")
    _bad(client, f"input[{len(nxt) - 2}].encrypted_content", input=nxt)


def test_compaction_trigger_streams_one_compaction_item(client):
    events = list(
        client.responses.create(
            model=M,
            input=HISTORY + [{"type": "compaction_trigger"}],
            stream=True,
            max_output_tokens=16,
            tools=NS_TOOLS,
            store=False,
        )
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert len(done) == 1 and done[0].type == "compaction" and done[0].encrypted_content
    assert events[-1].type == "response.completed" and events[-1].response.usage.output_tokens >= 1


def test_compact_requires_input(client, server):
    r = httpx.post(
        server.url + "/v1/responses/compact",
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={"model": M, "instructions": "x"},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"


# ---- units: the item and event mapping ------------------------------------------------------------
def test_namespace_flattening_matches_codex():
    assert flat_name("mcp__github__", "create_issue") == "mcp__github__create_issue"
    assert flat_name("crm", "_lookup") == "crm__lookup" and flat_name(None, "f") == "f"
    tm = build_tools(NS_TOOLS)
    assert [t["function"]["name"] for t in tm.template] == [
        "shell_command",
        "mcp__github__create_issue",
        "apply_patch",
        "local_shell",
    ]
    assert tm.lookup("mcp__github__create_issue") == ("function", "mcp__github__", "create_issue")
    assert "lark" in tm.template[2]["function"]["description"]


def test_output_items_and_events_from_parser_events():
    b = OutputBuilder(build_tools(NS_TOOLS), b"k", summary=True, encrypted=True)
    sse = []
    for ev in [
        Event("reasoning", "\n"),
        Event("reasoning", "Think"),
        Event("reasoning", "ing."),
        Event("content", "\n\n"),
        Event("content", "Hi"),
        Event("tool_call", index=0, name="mcp__github__create_issue", id="call_a"),
        Event("tool_args", '{"title": "t"}', index=0),
        Event("content", "\n"),
        Event("tool_call", index=1, name="apply_patch", id="call_b"),
        Event("tool_args", '{"input": "P"}', index=1),
        Event("tool_call", index=2, name="local_shell", id="call_c"),
        Event("tool_args", '{"command": ["ls"]}', index=2),
        Event("tool_call", index=3, name="unknown_tool", id="call_d"),
        Event("tool_args", "{}", index=3),
    ]:
        sse += b.feed(ev)
    sse += b.finish()
    rs, msg, fc, ctc, lsc, other = b.output
    assert rs["type"] == "reasoning" and rs["content"] == [
        {"type": "reasoning_text", "text": "Thinking."}
    ]
    assert (
        rs["summary"] == [{"type": "summary_text", "text": "Thinking."}] and rs["encrypted_content"]
    )
    assert msg["content"][0]["text"] == "Hi" and msg["status"] == "completed"
    assert (fc["type"], fc["name"], fc["namespace"], fc["call_id"], fc["arguments"]) == (
        "function_call",
        "create_issue",
        "mcp__github__",
        "call_a",
        '{"title": "t"}',
    )
    assert (ctc["type"], ctc["name"], ctc["input"]) == ("custom_tool_call", "apply_patch", "P")
    assert lsc["type"] == "local_shell_call" and lsc["action"]["command"] == ["ls"]
    assert (
        other["type"] == "function_call"
        and other["name"] == "unknown_tool"
        and "namespace" not in other
    )
    types = [json.loads(s.split("data: ", 1)[1])["type"] for s in sse]
    assert types[:4] == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
    ]
    assert (
        types.count("response.output_item.added") == types.count("response.output_item.done") == 6
    )
    assert (
        "response.function_call_arguments.done" in types
        and "response.custom_tool_call_input.done" in types
    )


def test_parallel_false_keeps_one_call():
    b = OutputBuilder(build_tools(NS_TOOLS), b"k", max_calls=1)
    for i in range(2):
        b.feed(Event("tool_call", index=i, name="shell_command", id=f"c{i}"))
        b.feed(Event("tool_args", '{"command": "ls"}', index=i))
    b.finish()
    assert [o["call_id"] for o in b.output] == ["c0"]


def test_input_items_to_template_messages():
    secret = b"k"
    msgs = convert_input(
        {
            "instructions": "Sys",
            "input": [
                {"role": "developer", "content": "Dev"},
                {"role": "user", "content": [{"type": "input_text", "text": "Q"}]},
                {
                    "type": "reasoning",
                    "summary": [],
                    "encrypted_content": seal(secret, "reasoning", "R1"),
                },
                {
                    "type": "function_call",
                    "namespace": "mcp__github__",
                    "name": "create_issue",
                    "arguments": '{"a": 1}',
                    "call_id": "c1",
                },
                {
                    "type": "function_call",
                    "name": "shell_command",
                    "arguments": "{}",
                    "call_id": "c2",
                },
                {"type": "function_call_output", "call_id": "c1", "output": "o1"},
                {"type": "custom_tool_call_output", "call_id": "c2", "output": "o2"},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "R2"}]},
                {"role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
                {"type": "compaction", "encrypted_content": seal(secret, "compaction", "S")},
            ],
        },
        secret,
    )
    assert msgs[0] == {"role": "system", "content": "Sys\n\nDev"}
    assert msgs[1] == {"role": "user", "content": "Q"}
    a = msgs[2]
    assert a["role"] == "assistant" and a["reasoning_content"] == "R1" and a["content"] == ""
    assert [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in a["tool_calls"]
    ] == [("c1", "mcp__github__create_issue", {"a": 1}), ("c2", "shell_command", {})]
    assert msgs[3] == {"role": "tool", "content": "o1", "tool_call_id": "c1"}
    assert msgs[4] == {"role": "tool", "content": "o2", "tool_call_id": "c2"}
    assert msgs[5] == {"role": "assistant", "content": "A", "reasoning_content": "R2"}
    assert msgs[6]["role"] == "user" and msgs[6]["content"].endswith("S")
