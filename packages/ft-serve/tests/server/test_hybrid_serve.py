"""Hybrid models (tiny qwen3_next and qwen3_5_moe: Gated DeltaNet + attention) served for real, driven by
the official ``openai`` and ``anthropic`` SDKs: the second turn of a conversation resumes from the state
checkpoint at the end of the first turn's prompt (or deeper) and re-prefills only its new suffix; usage
and ``/metrics`` report it. qwen3_5_moe has Qwen3.5's template: thinking opened by the generation prompt,
``<function=...>`` tool calls (the qwen3_coder parser)."""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import openai
import pytest
from ft_core import Engine
from serve_helpers import API_KEY, start_server

import tiny_checkpoints

SYSTEM = "You are a coding agent. Answer briefly. " * 4


def serve(tmp_path_factory, arch: str, max_model_len: int | None = None):
    """(server, engine, the sequences of every request so far) for the tiny ``arch``; ``max_model_len``
    past the tiny config's 512 positions (a random model has no trained context to keep)."""
    path = tiny_checkpoints.make_checkpoint(arch, tmp_path_factory.mktemp(arch) / arch)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FT_ALLOW_LONG_MAX_MODEL_LEN", "1")
        eng = Engine.from_pretrained(path, max_model_len=max_model_len)
    prompts, add = [], eng.add_request

    def record(
        prompt, *a, **k
    ):  # the ids each request was admitted with (the engine itself runs them)
        seq = add(prompt, *a, **k)
        prompts.append(seq)
        return seq

    eng.add_request = record
    return start_server(eng, api_key=API_KEY), eng, prompts


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    s, eng, prompts = serve(tmp_path_factory, "qwen3_next")
    yield s, eng, prompts
    s.stop()


@pytest.fixture(scope="module")
def served35(tmp_path_factory):
    s, eng, prompts = serve(tmp_path_factory, "qwen3_5_moe")
    yield s, eng, prompts
    s.stop()


@pytest.fixture(scope="module")
def served_oss(tmp_path_factory):
    s, eng, prompts = serve(
        tmp_path_factory, "gpt_oss", 2048
    )  # sliding windows kept as state (window_state auto)
    yield s, eng, prompts
    s.stop()


def metric(server, name: str) -> float:
    text = httpx.get(server.url + "/metrics", headers={"authorization": f"Bearer {API_KEY}"}).text
    return float(re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE).group(1))


def check_second_turn(seqs, cached: int, prompt_tokens: int) -> int:
    """The second request resumed where the first turn's prompt ends or, when the template re-renders the
    first turn differently (it drops an empty thinking block), exactly at the first changed token; it
    never resumes past that token. Returns the first changed position."""
    first, second = seqs[-2], seqs[-1]
    p1, p2 = first.prompt_ids, second.prompt_ids
    assert len(p2) == prompt_tokens and cached == second.cached_tokens
    lcp = next((i for i, (a, b) in enumerate(zip(p2, p1 + first.output_ids)) if a != b), len(p2))
    assert min(len(p1), lcp) <= cached <= lcp < len(p2)
    return lcp


def openai_two_turns(server, seqs) -> tuple[int, int]:
    """Turn 1, then turn 2 = turn 1 + its answer + a new user message, through the OpenAI SDK. Checks that
    turn 2 resumed where ``check_second_turn`` allows, one more checkpoint hit, and that exactly the
    uncached tokens were prefilled (/metrics). Returns (cached tokens, first changed position)."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    msgs = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "List the files in src."},
    ]
    r1 = client.chat.completions.create(model="ft-test", messages=msgs, max_tokens=8, temperature=0)
    assert r1.usage.prompt_tokens_details.cached_tokens == 0
    hits, prefilled = (
        metric(server, "ft_prefix_checkpoint_hits_total"),
        metric(server, "ft_prefill_tokens_total"),
    )
    msgs += [
        {"role": "assistant", "content": r1.choices[0].message.content or "ok"},
        {"role": "user", "content": "Now open the first one."},
    ]
    r2 = client.chat.completions.create(model="ft-test", messages=msgs, max_tokens=4, temperature=0)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    lcp = check_second_turn(seqs, cached, r2.usage.prompt_tokens)
    assert metric(server, "ft_prefix_checkpoint_hits_total") == hits + 1
    assert metric(server, "ft_prefill_tokens_total") == prefilled + r2.usage.prompt_tokens - cached
    assert metric(server, "ft_prefix_checkpoints") > 0
    return cached, lcp


def test_openai_second_turn_reprefills_only_the_suffix(served):
    server, _, seqs = served
    openai_two_turns(server, seqs)
    assert (
        seqs[-2].prompt_ids == seqs[-1].prompt_ids[: len(seqs[-2].prompt_ids)]
    )  # thinking on: turn 1 kept


def test_anthropic_second_turn_reprefills_only_the_suffix(served):
    server, _, seqs = served
    client = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "What does main.py do?"}]
    m1 = client.messages.create(model="ft-test", system=SYSTEM, max_tokens=8, messages=msgs)
    text = "".join(b.text for b in m1.content if b.type == "text")
    hits, prefilled = (
        metric(server, "ft_prefix_checkpoint_hits_total"),
        metric(server, "ft_prefill_tokens_total"),
    )
    msgs += [
        {"role": "assistant", "content": text or "ok"},
        {"role": "user", "content": "And util.py?"},
    ]
    m2 = client.messages.create(model="ft-test", system=SYSTEM, max_tokens=4, messages=msgs)
    cached = m2.usage.cache_read_input_tokens  # Anthropic counts input_tokens after the cached ones
    lcp = check_second_turn(seqs, cached, m2.usage.input_tokens + cached)
    assert cached == lcp  # no thinking: turn 1's empty think block is gone, resumed right before it
    assert metric(server, "ft_prefix_checkpoint_hits_total") == hits + 1
    assert metric(server, "ft_prefill_tokens_total") == prefilled + m2.usage.input_tokens


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List the files of a directory.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
CALL = "<tool_call>\n<function=list_files>\n<parameter=path>\nsrc\n</parameter>\n</function>\n</tool_call>"


def test_qwen35_tool_turn_reprefills_only_the_suffix(served35):
    """An agent loop: turn 1 asks, the assistant calls a tool (its reasoning echoed back), the tool answers;
    turn 2's prompt extends turn 1's (which ends inside the opened thinking block), so it resumes at or
    past that prompt's end and prefills only the rest."""
    server, eng, seqs = served35
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    msgs = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "List the files in src."},
    ]
    r1 = client.chat.completions.create(
        model="ft-test", messages=msgs, tools=TOOLS, max_tokens=8, temperature=0
    )
    assert r1.usage.prompt_tokens_details.cached_tokens == 0
    before = eng.prefix_stats()
    msgs += [
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should list them first.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": '{"path": "src"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "main.py\nutil.py"},
    ]
    r2 = client.chat.completions.create(
        model="ft-test", messages=msgs, tools=TOOLS, max_tokens=4, temperature=0
    )
    after = eng.prefix_stats()
    cached = r2.usage.prompt_tokens_details.cached_tokens
    p1, p2 = seqs[-2].prompt_ids, seqs[-1].prompt_ids
    text = eng.tokenizer.decode(p2, skip_special_tokens=False)
    assert (
        "<|im_start|>assistant\n<think>\nI should list them first.\n</think>\n\n"
        + CALL
        + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nmain.py\nutil.py\n</tool_response><|im_end|>\n"
    ) in text
    assert text.endswith("<|im_start|>assistant\n<think>\n")
    assert p2[: len(p1)] == p1  # the reasoning continues turn 1's opened <think> block
    check_second_turn(seqs, cached, r2.usage.prompt_tokens)
    assert cached >= len(p1)
    assert after["checkpoint_hits"] == before["checkpoint_hits"] + 1
    assert after["checkpoint_hit_tokens"] == before["checkpoint_hit_tokens"] + cached
    assert (
        after["prefill_tokens"] == before["prefill_tokens"] + len(p2) - cached
    )  # only the new suffix


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "list_files"}}]
)
def test_qwen35_forced_tool_call(served35, choice):
    """tool_choice forces the call's opening (thinking off: an empty block, then ``<tool_call>`` and, when
    named, ``<function=NAME>``) and the qwen3_coder grammar the rest: the random model's call closes and
    parses (its path is raw text, at most max_tokens / 2 characters)."""
    server, eng, seqs = served35
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    r = client.chat.completions.create(
        model="ft-test",
        messages=[{"role": "user", "content": "List src."}],
        tools=TOOLS,
        tool_choice=choice,
        max_tokens=64,
        temperature=0,
    )
    opening = "<tool_call>\n" if choice == "required" else "<tool_call>\n<function=list_files>\n"
    prompt = eng.tokenizer.decode(seqs[-1].prompt_ids, skip_special_tokens=False)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n" + opening)
    c = r.choices[0]
    assert (
        c.finish_reason == "tool_calls" and not c.message.content and len(c.message.tool_calls) == 1
    )
    call = c.message.tool_calls[0].function
    args = json.loads(call.arguments)
    assert call.name == "list_files" and list(args) == ["path"] and isinstance(args["path"], str)
    assert len(args["path"]) <= 32


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The forecast of a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "alerts": {"type": "boolean"},
            },
            "required": ["city", "days", "unit"],
        },
    },
}


def check_call(name: str, args) -> None:
    """``args`` is a JSON object valid for the schema of tool ``name`` (WEATHER or TOOLS[0])."""
    assert isinstance(args, dict)
    if name == "list_files":
        assert list(args) == ["path"] and isinstance(args["path"], str)
        return
    assert (
        name == "get_weather"
        and list(args)[:3] == ["city", "days", "unit"]
        and set(args) <= {*list(args)[:3], "alerts"}
    )
    assert isinstance(args["city"], str) and type(args["days"]) is int and 1 <= args["days"] <= 14
    assert args["unit"] in ("celsius", "fahrenheit") and isinstance(args.get("alerts", False), bool)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    "choice",
    ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named"],
)
@pytest.mark.parametrize("model", ["served35", "served_oss"], ids=["qwen3_coder", "harmony"])
def test_forced_call_follows_the_schema(request, model, choice, stream):
    """A random model under tool_choice required / named writes one complete call (qwen3_coder XML on
    Qwen3.5, harmony on GPT-OSS: the grammar allows only the tools' names, their declared parameters and
    values of each schema), parsed into a tool call with JSON-object arguments valid for the schema;
    streamed the same."""
    server, _, _ = request.getfixturevalue(model)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    for seed in (1, 2, 3):
        kw = dict(
            model="ft-test",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[WEATHER, *TOOLS],
            tool_choice=choice,
            parallel_tool_calls=False,
            max_tokens=256,
            temperature=1.0,
            seed=seed,
        )
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kw))
            deltas = [
                d for ch in chunks if ch.choices for d in ch.choices[0].delta.tool_calls or []
            ]
            finish = [
                ch.choices[0].finish_reason
                for ch in chunks
                if ch.choices and ch.choices[0].finish_reason
            ]
            content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            assert {d.index for d in deltas} == {0}
            name = "".join(d.function.name or "" for d in deltas)
            arguments = "".join(d.function.arguments or "" for d in deltas)
        else:
            c = client.chat.completions.create(**kw).choices[0]
            finish, content = [c.finish_reason], c.message.content or ""
            assert len(c.message.tool_calls) == 1
            name, arguments = (
                c.message.tool_calls[0].function.name,
                c.message.tool_calls[0].function.arguments,
            )
        assert finish == ["tool_calls"] and not content.strip()
        if choice != "required":
            assert name == "get_weather"
        check_call(name, json.loads(arguments))


def test_qwen35_forced_call_responses_and_anthropic(served35):
    """The same grammar behind the Responses API (tool_choice required) and Anthropic Messages (tool_choice
    {"type": "tool"}): a function_call item / a tool_use block whose input is valid for the schema."""
    server, _, _ = served35
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    r = client.responses.create(
        model="ft-test",
        input="Weather in Paris?",
        max_output_tokens=256,
        temperature=1.0,
        tools=[{"type": "function", **WEATHER["function"]}],
        tool_choice="required",
    )
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and all(check_call(c.name, json.loads(c.arguments)) is None for c in calls)
    ac = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)
    f = WEATHER["function"]
    for stream in (False, True):
        kw = dict(
            model="ft-test",
            max_tokens=256,
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[
                {
                    "name": f["name"],
                    "description": f["description"],
                    "input_schema": f["parameters"],
                }
            ],
            tool_choice={"type": "tool", "name": "get_weather"},
        )
        if stream:
            with ac.messages.stream(**kw) as s:
                m = s.get_final_message()
        else:
            m = ac.messages.create(**kw)
        uses = [b for b in m.content if b.type == "tool_use"]
        assert m.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather"
        check_call("get_weather", uses[0].input)


def test_gpt_oss_window_state_second_turn_reprefills_only_the_suffix(served_oss):
    """GPT-OSS keeps its sliding windows as state: turn 2 (harmony) restores a window checkpoint and the
    full layers' pages, and prefills only what follows it; /metrics counts the hit."""
    server, eng, seqs = served_oss
    assert (
        eng.checkpoints is not None and eng.state_layout is not None
    )  # windows are state, not paged KV
    cached, lcp = openai_two_turns(server, seqs)
    assert (
        cached > lcp - 8
    )  # at most a few tokens before the first changed one (anchors closer than 8 merge)
