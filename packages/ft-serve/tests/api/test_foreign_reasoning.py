"""Sessions begun elsewhere continue here (issue 14, defect 5): thinking blocks signed by Anthropic,
Responses reasoning and compaction items encrypted by OpenAI or signed by another ft server are
foreign, never a 400. Their plain text is rendered where this server's own reasoning would be, a
blob nobody here can read is dropped, and each is counted in ``ft_foreign_reasoning_total``; a
token that names this server's key id but does not verify is still a 400. Through a real server on
loopback with the official ``anthropic`` and ``openai`` SDKs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import re

import anthropic
import httpx
import openai
import pytest
from ft_serve.api.anthropic_blocks import _SIG_DOMAIN, sign_thinking
from ft_serve.api.anthropic_messages import chat_request
from ft_serve.api.responses_items import SUMMARY_PREFIX, convert_input
from ft_serve.api.signing import seal

from serve_helpers import API_KEY

MODEL = "ft-test"
# What the clouds hand out: an Anthropic thinking signature (base64 protobuf, ~1 kB) and an OpenAI
# encrypted_content (a Fernet token: version byte 0x80, timestamp, IV, ciphertext, HMAC).
ANTHROPIC_SIG = base64.b64encode(b"\x12\xaa\x0a" + random.Random(1).randbytes(900)).decode()
OPENAI_BLOB = base64.urlsafe_b64encode(
    b"\x80\x00\x00\x00\x00h\x9a\x1b" + random.Random(2).randbytes(1200)
).decode()
THOUGHT = "The user wants the weather in Paris, so I call get_weather."
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
TOOL_ID = "toolu_01A09q90qw90lq917835lq9"
SHELL = [
    {
        "type": "function",
        "name": "shell",
        "description": "Run a command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "array", "items": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


def foreign_counts(server) -> dict[tuple[str, str], float]:
    """{(api, kind): value} of ft_foreign_reasoning_total."""
    text = httpx.get(
        server.url + "/metrics", headers={"authorization": f"Bearer {API_KEY}"}, timeout=10
    ).text
    out = {}
    for m in re.finditer(r"^ft_foreign_reasoning_total\{([^}]*)\} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        out[(labels["api"], labels["kind"])] = float(m.group(2))
    return out


def delta(before: dict, after: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


# ---- Anthropic Messages ----------------------------------------------------------------------
def session(*thinking: dict) -> list[dict]:
    """A Claude Code turn in progress: the assistant thought, called a tool, its result is back."""
    call = {"type": "tool_use", "id": TOOL_ID, "name": "get_weather", "input": {"city": "Paris"}}
    result = {"type": "tool_result", "tool_use_id": TOOL_ID, "content": "18 C, cloudy"}
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [*thinking, {"type": "text", "text": "Let me check."}, call],
        },
        {"role": "user", "content": [result]},
    ]


def anthropic_thinking(signature: str, text: str = THOUGHT) -> dict:
    return {"type": "thinking", "thinking": text, "signature": signature}


def test_anthropic_signed_thinking_continues(claude, server):
    before = foreign_counts(server)
    m = claude.messages.create(
        model=MODEL,
        max_tokens=4,
        tools=TOOLS,
        thinking={"type": "adaptive"},
        messages=session(anthropic_thinking(ANTHROPIC_SIG)),
    )
    assert m.usage.output_tokens > 0 and m.stop_reason in ("end_turn", "max_tokens", "tool_use")
    with claude.messages.stream(
        model=MODEL, max_tokens=4, tools=TOOLS, messages=session(anthropic_thinking(ANTHROPIC_SIG))
    ) as s:
        assert s.get_final_message().usage.output_tokens > 0
    assert delta(before, foreign_counts(server)) == {("anthropic", "thinking"): 2}


def test_foreign_thinking_renders_like_our_own(claude, server):
    """The demo template renders every assistant turn's reasoning; foreign text goes exactly where a
    block this server signed goes (same prompt), and is not lost (more tokens than without it)."""
    secret = server.app.state.config.secret
    own = anthropic_thinking(sign_thinking(secret, THOUGHT))
    foreign = anthropic_thinking(ANTHROPIC_SIG)

    def count(*blocks) -> int:
        r = claude.messages.count_tokens(model=MODEL, tools=TOOLS, messages=session(*blocks))
        return r.input_tokens

    assert count(foreign) == count(own) > count()
    svc = server.app.state.service
    body = {"model": MODEL, "tools": TOOLS, "messages": session(foreign)}
    req, _ = chat_request(body, svc, count_only=True)
    prompt = svc.engine.tokenizer.decode(svc.render(req)[0], skip_special_tokens=False)
    assert f"<think>\n{THOUGHT}\n</think>" in prompt
    assert prompt.index(THOUGHT) < prompt.index("Let me check.") < prompt.index("18 C, cloudy")


def test_redacted_and_empty_thinking_are_accepted(claude, server):
    before = foreign_counts(server)
    blocks = (
        {"type": "redacted_thinking", "data": ANTHROPIC_SIG},
        anthropic_thinking(ANTHROPIC_SIG, ""),
    )  # a block whose display was "omitted"
    m = claude.messages.create(model=MODEL, max_tokens=2, tools=TOOLS, messages=session(*blocks))
    assert m.usage.output_tokens > 0
    assert delta(before, foreign_counts(server)) == {
        ("anthropic", "redacted_thinking"): 1,
        ("anthropic", "thinking"): 1,
    }
    tokens = [
        claude.messages.count_tokens(model=MODEL, tools=TOOLS, messages=session(*b)).input_tokens
        for b in (blocks, ())
    ]
    assert tokens[0] == tokens[1]  # both dropped


def test_anthropic_altered_is_refused_and_older_signatures_verify(claude, server):
    secret = server.app.state.config.secret
    own = sign_thinking(secret, THOUGHT)
    kid_head = own[: own.rindex(".") + 1]  # "ft2.<key id>."
    for sig in (sign_thinking(secret, "another thought"), kid_head + ANTHROPIC_SIG[:44]):
        with pytest.raises(anthropic.BadRequestError) as e:
            claude.messages.create(
                model=MODEL, max_tokens=2, tools=TOOLS, messages=session(anthropic_thinking(sig))
            )
        assert "messages[1].content[0].signature" in e.value.body["error"]["message"]
    # the bare HMAC that servers before key ids issued still verifies: not counted as foreign
    mac = hmac.new(secret, _SIG_DOMAIN + THOUGHT.encode(), hashlib.sha256).digest()
    before = foreign_counts(server)
    claude.messages.create(
        model=MODEL,
        max_tokens=2,
        tools=TOOLS,
        messages=session(anthropic_thinking(base64.b64encode(mac).decode())),
    )
    assert delta(before, foreign_counts(server)) == {}


# ---- OpenAI Responses ------------------------------------------------------------------------
def codex_input(summary: str | None, blob: str = OPENAI_BLOB) -> list[dict]:
    """A Codex session begun on OpenAI: reasoning (with or without a summary) before a call, its
    output, another reasoning item with no summary before the answer, and the next user message."""

    def msg(role: str, kind: str, text: str) -> dict:
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}

    return [
        msg("user", "input_text", "List the files."),
        {
            "type": "reasoning",
            "id": "rs_0a1b",
            "encrypted_content": blob,
            "summary": [{"type": "summary_text", "text": summary}] if summary else [],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "shell",
            "arguments": '{"command": ["ls"]}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "a.py\nb.py"},
        {"type": "reasoning", "id": "rs_0a1c", "encrypted_content": blob, "summary": []},
        msg("assistant", "output_text", "Two files."),
        msg("user", "input_text", "Thanks."),
    ]


def test_responses_foreign_reasoning_continues(oai, server):
    before = foreign_counts(server)
    kw = {"model": MODEL, "tools": SHELL, "max_output_tokens": 16, "store": False}
    with_summary = oai.responses.create(
        input=codex_input(THOUGHT), include=["reasoning.encrypted_content"], **kw
    )
    bare = oai.responses.create(input=codex_input(None), **kw)
    assert {with_summary.status, bare.status} <= {"completed", "incomplete"}
    assert with_summary.usage.input_tokens > bare.usage.input_tokens  # the summary is in the prompt
    events = list(oai.responses.create(input=codex_input(None), stream=True, **kw))
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert delta(before, foreign_counts(server)) == {("responses", "reasoning"): 6}


def test_foreign_reasoning_becomes_history_like_our_own():
    """A foreign reasoning item gives its summary text the place a verified one gives its own text;
    an ft token under another key gives the text it carries; nothing readable adds nothing."""
    secret, kinds = b"this server", []
    foreign = convert_input({"input": codex_input(THOUGHT)}, secret, kinds.append)
    own = codex_input(None, seal(secret, "reasoning", THOUGHT))
    own[4]["encrypted_content"] = OPENAI_BLOB
    assert foreign == convert_input({"input": own}, secret) and kinds == ["reasoning", "reasoning"]
    assert foreign[1]["reasoning_content"] == THOUGHT and "reasoning_content" not in foreign[3]
    moved = codex_input(None, seal(b"a former secret", "reasoning", THOUGHT))
    assert convert_input({"input": moved}, secret)[1]["reasoning_content"] == THOUGHT


def test_foreign_compaction_is_dropped(oai, server, caplog):
    secret = server.app.state.config.secret
    items = [
        {"type": "compaction", "id": "cmp_1", "encrypted_content": OPENAI_BLOB},
        {"type": "message", "role": "user", "content": "continue"},
    ]
    before = foreign_counts(server)
    with caplog.at_level("INFO", logger="ft.serve"):
        r = oai.responses.create(model=MODEL, input=items, max_output_tokens=16, store=False)
    assert r.status in ("completed", "incomplete")
    assert any("compaction item this server did not issue" in rec.message for rec in caplog.records)
    c = oai.responses.compact(
        model=MODEL, input=codex_input(THOUGHT), extra_body={"max_output_tokens": 16}
    )
    assert c.output[-1].type == "compaction"
    assert delta(before, foreign_counts(server)) == {
        ("responses", "compaction"): 1,
        ("responses", "reasoning"): 2,
    }
    assert convert_input({"input": items}, secret) == [{"role": "user", "content": "continue"}]
    moved = [
        {**items[0], "encrypted_content": seal(b"a former secret", "compaction", "S")},
        items[1],
    ]
    assert convert_input({"input": moved}, secret)[0] == {
        "role": "user",
        "content": SUMMARY_PREFIX + "S",
    }


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def test_responses_altered_is_refused_and_older_tokens_verify(oai, server):
    secret = server.app.state.config.secret
    v, kid, _, mac = seal(secret, "reasoning", THOUGHT).split(".")
    altered = ".".join([v, kid, seal(secret, "reasoning", "another thought").split(".")[2], mac])
    kw = {"model": MODEL, "tools": SHELL, "max_output_tokens": 16, "store": False}
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(input=codex_input(None, altered), **kw)
    assert e.value.body["param"] == "input[1].encrypted_content"
    assert e.value.body["code"] == "invalid_encrypted_content"
    # ft1.<payload>.<mac>: what servers before key ids issued, still verified (not foreign)
    payload = _b64(json.dumps({"k": "reasoning", "t": THOUGHT}).encode())
    legacy = f"ft1.{payload}.{_b64(hmac.new(secret, payload.encode(), hashlib.sha256).digest())}"
    items = codex_input(None, legacy)
    items[4]["encrypted_content"] = legacy
    before = foreign_counts(server)
    oai.responses.create(input=items, **kw)
    assert delta(before, foreign_counts(server)) == {}
    assert convert_input({"input": items}, secret)[1]["reasoning_content"] == THOUGHT
