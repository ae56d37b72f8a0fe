"""Output parsers on crafted model outputs, fed whole, one character at a time and in random
chunks: the merged events must not depend on the chunking and must equal the expected
reasoning, content and tool calls."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field

import pytest
from ft_serve.parsers import collect, make_parser
from hypothesis import given, settings
from hypothesis import strategies as st

DS_BEGIN, DS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


@dataclass(frozen=True)
class Case:
    id: str
    tool: str
    reasoning: str
    text: str
    want_reasoning: str = ""
    want_content: str = ""
    want_calls: tuple = ()  # (name, arguments as a dict), in order
    flags: dict = field(default_factory=dict)


def hermes(name: str, args: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


CASES = [
    # --- think + hermes (Qwen3) ---
    Case(
        "qwen3_two_calls",
        "hermes",
        "think",
        "\nI should call both.\n</think>\n\nLet me check.\n"
        + hermes("get_weather", {"city": "Paris"})
        + "\n"
        + hermes("get_time", {"tz": "CET"}),
        "I should call both.",
        "Let me check.\n",
        (("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})),
        {"starts_in_reasoning": True},
    ),
    Case(
        "think_in_output",
        "hermes",
        "think",
        "<think>\nhmm, 2+2\n</think>\n\nThe answer is 4.",
        "hmm, 2+2",
        "The answer is 4.",
    ),
    Case(
        "reasoning_whitespace",
        "hermes",
        "think",
        "  \n  reason  a \n\n</think>\n\n  indented",
        "reason  a",
        "  indented",
        flags={"starts_in_reasoning": True},
    ),
    Case(
        "never_closed_is_reasoning",
        "hermes",
        "think",
        "\nstill thinking " + hermes("f", {}) + "\n",
        "still thinking " + hermes("f", {}),
        flags={"starts_in_reasoning": True},
    ),
    Case(
        "less_than_text",
        "hermes",
        "think",
        "a < b, x<y and <tool_x> then <tool_ca",
        want_content="a < b, x<y and <tool_x> then <tool_ca",
    ),
    Case(
        "think_later_is_content",
        "hermes",
        "think",
        "ok <think>not reasoning</think>",
        want_content="ok <think>not reasoning</think>",
    ),
    Case(
        "bad_json_falls_back",
        "hermes",
        "none",
        'Hi <tool_call>\n{"name": "f", "arguments": {oops}}\n</tool_call> bye',
        want_content='Hi <tool_call>\n{"name": "f", "arguments": {oops}}\n</tool_call> bye',
    ),
    Case(
        "missing_name_falls_back",
        "hermes",
        "none",
        '<tool_call>{"arguments": {}}</tool_call>',
        want_content='<tool_call>{"arguments": {}}</tool_call>',
    ),
    Case(
        "unterminated_falls_back",
        "hermes",
        "think",
        'Sure.\n<tool_call>\n{"name": "f", "argu',
        want_content='Sure.\n<tool_call>\n{"name": "f", "argu',
    ),
    Case(
        "good_then_bad",
        "hermes",
        "none",
        hermes("f", {"a": 1}) + "\n<tool_call>\n{bad}\n</tool_call>",
        want_content="\n<tool_call>\n{bad}\n</tool_call>",
        want_calls=(("f", {"a": 1}),),
    ),
    Case(
        "unclosed_then_good",
        "hermes",
        "none",
        "<tool_call>{bad " + hermes("f", {}),
        want_content="<tool_call>{bad ",
        want_calls=(("f", {}),),
    ),
    Case(
        "whitespace_around_calls",
        "hermes",
        "none",
        "\n \n" + hermes("f", {}) + "\n\n",
        want_calls=(("f", {}),),
    ),
    Case("whitespace_only", "hermes", "none", " \n", want_content=" \n"),
    Case(
        "tools_disabled",
        "hermes",
        "think",
        "x " + hermes("f", {"a": 1}),
        want_content="x " + hermes("f", {"a": 1}),
        flags={"tools_enabled": False},
    ),
    Case(
        "tool_none",
        "none",
        "think",
        "<think>r</think>c " + hermes("f", {}),
        "r",
        "c " + hermes("f", {}),
    ),
    Case("reasoning_none", "hermes", "none", "<think>x</think>y", want_content="<think>x</think>y"),
    Case(
        "arguments_as_string",
        "hermes",
        "none",
        '<tool_call>{"name": "f", "arguments": "{\\"a\\": [1, 2]}"}</tool_call>',
        want_calls=(("f", {"a": [1, 2]}),),
    ),
    Case(
        "content_after_call",
        "hermes",
        "none",
        hermes("f", {"s": "é<"}) + "\n\nDone.",
        want_content="\n\nDone.",
        want_calls=(("f", {"s": "é<"}),),
    ),
    Case("empty", "hermes", "think", ""),
    # --- qwen3_coder ---
    Case(
        "qwen3_coder_calls",
        "qwen3_coder",
        "none",
        "I'll run it.\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -la\n</parameter>\n<parameter=timeout>\n30\n"
        '</parameter>\n<parameter=opts>\n{"a": [1, true]}\n</parameter>\n</function>\n</tool_call>\n'
        "<tool_call>\n<function=noargs>\n</function>\n</tool_call>",
        want_content="I'll run it.\n",
        want_calls=(
            ("run", {"cmd": "ls -la", "timeout": 30, "opts": {"a": [1, True]}}),
            ("noargs", {}),
        ),
    ),
    Case(
        "qwen3_coder_code_value",
        "qwen3_coder",
        "think",
        "<think>\nwrite it\n</think>\n\n<tool_call>\n<function=write>\n<parameter=content>\ndef f():\n"
        "    return 1 < 2\n</parameter>\n<parameter=path>\nNaN\n</parameter>\n</function>\n</tool_call>",
        "write it",
        "",
        (("write", {"content": "def f():\n    return 1 < 2", "path": "NaN"}),),
    ),
    Case(
        "qwen3_coder_malformed",
        "qwen3_coder",
        "none",
        "<tool_call>\n<function=run>\nstray\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
        want_content="<tool_call>\n<function=run>\nstray\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
    ),
    # --- glm45 ---
    Case(
        "glm45_calls",
        "glm45",
        "think",
        "<think>reason</think>\nI'll check.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing"
        "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call><tool_call>now\n</tool_call>",
        "reason",
        "I'll check.",
        (("get_weather", {"city": "Beijing", "days": 3}), ("now", {})),
    ),
    Case(
        "glm45_malformed",
        "glm45",
        "none",
        "<tool_call>bad name\n<arg_key>k</arg_key></tool_call>",
        want_content="<tool_call>bad name\n<arg_key>k</arg_key></tool_call>",
    ),
    # --- deepseek_v3 ---
    Case(
        "deepseek_v3",
        "deepseek_v3",
        "think",
        f'Let me look.{DS_BEGIN}{DS_CALL}function{DS_SEP}get_weather\n```json\n{{"city": "Tokyo"}}\n```'
        f"{DS_CALL_END}\n{DS_CALL}function{DS_SEP}get_time\n```json\n{{}}\n```{DS_CALL_END}{DS_END}",
        want_content="Let me look.",
        want_calls=(("get_weather", {"city": "Tokyo"}), ("get_time", {})),
    ),
    Case(
        "deepseek_v31",
        "deepseek_v3",
        "think",
        f'r</think>ok{DS_BEGIN}{DS_CALL}search{DS_SEP}{{"q": "x"}}{DS_CALL_END}{DS_END}',
        "r",
        "ok",
        (("search", {"q": "x"}),),
        {"starts_in_reasoning": True},
    ),
    Case(
        "deepseek_unterminated",
        "deepseek_v3",
        "none",
        f'A{DS_BEGIN}{DS_CALL}get{DS_SEP}{{"q"',
        want_content=f'A{DS_BEGIN}{DS_CALL}get{DS_SEP}{{"q"',
    ),
    Case(
        "deepseek_bad_json",
        "deepseek_v3",
        "none",
        f"{DS_BEGIN}{DS_CALL}get{DS_SEP}{{bad}}{DS_CALL_END}{DS_END}",
        want_content=f"{DS_BEGIN}{DS_CALL}get{DS_SEP}{{bad}}{DS_CALL_END}{DS_END}",
    ),
    # --- harmony (GPT-OSS) ---
    Case(
        "harmony_analysis_call",
        "harmony",
        "harmony",
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"location": "SF"}<|call|>',
        "Need weather.",
        "",
        (("get_weather", {"location": "SF"}),),
    ),
    Case(
        "harmony_final",
        "harmony",
        "none",
        "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>Hello a < b!<|return|>",
        "Simple.",
        "Hello a < b!",
    ),
    Case(
        "harmony_recipient_first",
        "harmony",
        "none",
        "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.lookup<|channel|>"
        'commentary json<|message|>{"id": 7}<|call|>',
        want_content="Checking.",
        want_calls=(("lookup", {"id": 7}),),
    ),
    Case(
        "harmony_no_stop_token",
        "harmony",
        "harmony",
        ' to=functions.f<|channel|>commentary json<|message|>{"x": 1}',
        want_calls=(("f", {"x": 1}),),
    ),
    Case(
        "harmony_bad_json",
        "harmony",
        "harmony",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops<|call|>",
        want_content="<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops<|call|>",
    ),
    Case(
        "harmony_tools_disabled",
        "harmony",
        "harmony",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>",
        want_content="{}",
        flags={"tools_enabled": False},
    ),
    Case(
        "harmony_tool_parser_none",
        "none",
        "harmony",
        "<|channel|>analysis<|message|>r<|end|><|start|>assistant to=functions.f<|channel|>commentary json"
        "<|message|>{}<|call|>",
        "r",
        "{}",
    ),
    Case(
        "harmony_plain_text",
        "harmony",
        "harmony",
        "Just text, a < b.",
        want_content="Just text, a < b.",
    ),
    Case(
        "harmony_starts_in_reasoning",
        "harmony",
        "harmony",
        "thinking<|end|><|start|>assistant<|channel|>final<|message|>hi<|return|>",
        "thinking",
        "hi",
        flags={"starts_in_reasoning": True},
    ),
]


def run(case: Case, chunks: list[str]):
    parser = make_parser(case.tool, case.reasoning, **case.flags)
    events = [ev for chunk in chunks for ev in parser.feed(chunk)] + parser.finish()
    for ev in events:
        assert ev.kind in ("tool_call", "tool_args") or ev.text, f"empty {ev.kind} event"
    got = collect(events)
    assert [(c["id"], c["name"], c["arguments"]) for c in got.tool_calls] == [
        (c["id"], c["name"], c["arguments"]) for c in parser.tool_calls
    ]
    for call in parser.tool_calls:
        assert call["id"].startswith("call_") and isinstance(json.loads(call["arguments"]), dict)
    assert len({c["id"] for c in parser.tool_calls}) == len(parser.tool_calls)
    calls = tuple((c["name"], json.loads(c["arguments"])) for c in got.tool_calls)
    return got.reasoning, got.content, calls


def cut(text: str, points: list[int]) -> list[str]:
    bounds = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_whole_and_per_character(case: Case) -> None:
    want = (case.want_reasoning, case.want_content, case.want_calls)
    assert run(case, [case.text]) == want
    assert run(case, list(case.text)) == want


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@settings(max_examples=25, deadline=None)
@given(points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_random_chunking(case: Case, points: list[int]) -> None:
    assert run(case, cut(case.text, points)) == (
        case.want_reasoning,
        case.want_content,
        case.want_calls,
    )
