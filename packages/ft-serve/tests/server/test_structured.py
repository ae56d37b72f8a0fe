"""Structured outputs on a real server: JSON schemas and forced tool calls are enforced by constrained
decoding, even on the random demo model (which never writes valid JSON by itself)."""

import json

import anthropic
import openai
import pytest

from serve_helpers import API_KEY

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "enum": ["README.md", "setup.py"]}},
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "count",
            "parameters": {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3}},
                "required": ["n"],
                "additionalProperties": False,
            },
        },
    },
]
MSG = [{"role": "user", "content": "Answer in JSON"}]


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


def valid(obj) -> bool:
    return set(obj) == {"ok", "n"} and isinstance(obj["ok"], bool) and obj["n"] in range(10)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chat_json_schema_is_enforced(oai, seed):
    r = oai.chat.completions.create(
        model="m",
        messages=MSG,
        max_tokens=64,
        seed=seed,
        temperature=1.0,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
    )
    assert r.choices[0].finish_reason == "stop" and valid(json.loads(r.choices[0].message.content))


def test_chat_json_streams_and_json_object(oai):
    chunks = oai.chat.completions.create(
        model="m",
        messages=MSG,
        max_tokens=64,
        seed=5,
        stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert valid(json.loads(text))
    # Any object: a random model may write one long key, so only its start is certain within 16 tokens.
    r = oai.chat.completions.create(
        model="m", messages=MSG, max_tokens=16, seed=5, response_format={"type": "json_object"}
    )
    out = r.choices[0].message.content
    assert out.startswith('{"') and (
        r.choices[0].finish_reason == "length" or isinstance(json.loads(out), dict)
    )


@pytest.mark.parametrize(
    "choice", [{"type": "function", "function": {"name": "read_file"}}, "required"]
)
def test_forced_tool_calls_are_valid_calls(oai, choice):
    r = oai.chat.completions.create(
        model="m",
        messages=MSG,
        tools=TOOLS,
        tool_choice=choice,
        max_tokens=64,
        seed=4,
        parallel_tool_calls=False,
    )
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1
    call = c.message.tool_calls[0].function
    args = json.loads(call.arguments)
    if choice != "required":
        assert call.name == "read_file"
    assert (call.name, sorted(args)) in [("read_file", ["path"]), ("count", ["n"])]
    assert args.get("path", "README.md") in ("README.md", "setup.py") and args.get("n", 1) in (
        1,
        2,
        3,
    )


def test_responses_and_anthropic_structured(server, oai):
    r = oai.responses.create(
        model="m",
        input="json please",
        max_output_tokens=64,
        text={"format": {"type": "json_schema", "name": "x", "schema": SCHEMA}},
    )
    assert valid(json.loads(r.output_text))
    r = oai.responses.create(
        model="m",
        input="read it",
        max_output_tokens=64,
        tools=[
            {
                "type": "function",
                "name": t["function"]["name"],
                "parameters": t["function"]["parameters"],
            }
            for t in TOOLS
        ],
        tool_choice={"type": "function", "name": "count"},
    )
    calls = [o for o in r.output if o.type == "function_call"]
    assert (
        len(calls) >= 1
        and calls[0].name == "count"
        and json.loads(calls[0].arguments)["n"] in (1, 2, 3)
    )
    ac = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    m = ac.messages.create(
        model="m",
        max_tokens=64,
        messages=[{"role": "user", "content": "json"}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
    )
    assert valid(json.loads(m.content[0].text))
    m = ac.messages.create(
        model="m",
        max_tokens=64,
        messages=[{"role": "user", "content": "read"}],
        tools=[{"name": "read_file", "input_schema": TOOLS[0]["function"]["parameters"]}],
        tool_choice={"type": "tool", "name": "read_file"},
    )
    uses = [b for b in m.content if b.type == "tool_use"]
    assert (
        m.stop_reason == "tool_use"
        and uses[0].name == "read_file"
        and uses[0].input["path"] in ("README.md", "setup.py")
    )


def test_unusable_schema_is_a_clear_400(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(
            model="m",
            messages=MSG,
            max_tokens=8,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "nonsense"}},
            },
        )
    assert "schema" in e.value.message
