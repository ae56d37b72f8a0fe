"""Output parsers piece by piece: marker scanning, value conversion, body parsers, event order,
hold-back while streaming, names and auto selection."""

from __future__ import annotations

import re

import pytest
from ft_serve.parsers import (
    PARSER_NAMES,
    Event,
    OutputParser,
    auto_parsers,
    collect,
    make_parser,
)
from ft_serve.parsers.base import find_first, json_value, partial_len
from ft_serve.parsers.families.deepseek_v3 import parse_deepseek
from ft_serve.parsers.families.glm45 import parse_glm45
from ft_serve.parsers.families.hermes import parse_hermes
from ft_serve.parsers.families.qwen3_coder import parse_qwen3_coder


def test_find_first_and_partial_len() -> None:
    assert find_first("ab<x><xy>", ("<xy>", "<x>")) == (2, "<x>")
    assert find_first("ab", ("<x>",)) == (-1, "")
    assert find_first("<x>a<x>", ("<x>",), 1) == (4, "<x>")
    assert partial_len("a <tool_ca", ("<tool_call>",)) == 8
    assert partial_len("a < b", ("<tool_call>",)) == 0
    assert partial_len("<tool_call>", ("<tool_call>",)) == 0  # whole markers are found, not held
    assert partial_len("", ("<x>",)) == 0


@pytest.mark.parametrize(
    "text, want",
    [
        ("30", 30),
        ("-1.5", -1.5),
        ("true", True),
        ("null", None),
        ('{"a": [1]}', {"a": [1]}),
        ("ls -la", "ls -la"),
        ("NaN", "NaN"),
        ("1e999", "1e999"),
        ("", ""),
        ('"q"', "q"),
    ],
)
def test_json_value(text: str, want: object) -> None:
    assert json_value(text) == want


def test_body_parsers() -> None:
    assert parse_hermes('{"name": "f"}') == ("f", {})
    assert parse_hermes('{"name": "f", "arguments": [1]}') is None
    assert parse_hermes('{"name": 3, "arguments": {}}') is None
    assert parse_hermes('{"name": "f", "arguments": {"x": NaN}}') is None
    assert parse_qwen3_coder("<function=f>\n<parameter=a>\n1\n<parameter=b>\nx y\n</function>") == (
        "f",
        {"a": 1, "b": "x y"},
    )  # lenient about a missing </parameter>
    assert parse_qwen3_coder("<function=f>\n<parameter=a>\n\n\n</parameter>\n</function>") == (
        "f",
        {"a": "\n"},
    )
    assert parse_qwen3_coder("no function") is None
    assert parse_glm45("f\n<arg_key> k </arg_key>\n<arg_value> v </arg_value>") == (
        "f",
        {"k": " v "},
    )
    assert parse_glm45("<arg_key>k</arg_key><arg_value>v</arg_value>") is None  # no name
    assert parse_deepseek('function<｜tool▁sep｜>f\n```json\n{"a": 1}\n```') == ("f", {"a": 1})
    assert parse_deepseek('f<｜tool▁sep｜>{"a": 1}') == ("f", {"a": 1})
    assert parse_deepseek('function<｜tool▁sep｜>{"a": 1}') == ("function", {"a": 1})
    assert parse_deepseek('f {"a": 1}') is None


def test_call_events_order_and_ids() -> None:
    parser = make_parser("hermes", "none")
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>'
    events = parser.feed(text) + parser.finish()
    assert [(e.kind, e.index) for e in events] == [
        ("tool_call", 0),
        ("tool_args", 0),
        ("tool_call", 1),
        ("tool_args", 1),
    ]
    assert [e.name for e in events if e.kind == "tool_call"] == ["a", "b"]
    for ev, call in zip(events[::2], parser.tool_calls):
        assert re.fullmatch(r"call_[0-9a-f]{24}", ev.id) and ev.id == call["id"]
    assert parser.tool_calls[1]["arguments"] == '{"x": 1}'
    assert isinstance(parser, OutputParser)


def test_less_than_is_held_only_until_disambiguated() -> None:
    parser = make_parser("hermes", "think")
    assert parser.feed("a <") == [Event("content", "a ")]
    assert parser.feed(" b") == [Event("content", "< b")]
    assert parser.feed(" <tool_") == [Event("content", " ")]
    assert parser.finish() == [Event("content", "<tool_")]


def test_reasoning_and_harmony_stream_before_finish() -> None:
    think = make_parser("hermes", "think", starts_in_reasoning=True)
    assert think.feed("\nstep one") == [Event("reasoning", "step one")]
    assert think.feed(" \n</th") == []  # trailing space may precede </think>
    assert think.feed("ink>\n\nHi") == [Event("content", "Hi")]
    harmony = make_parser("harmony", "harmony")
    assert harmony.feed("<|channel|>analysis<|message|>abc <|e") == [Event("reasoning", "abc ")]
    assert harmony.feed("nd|><|start|>assistant<|channel|>final<|message|>x") == [
        Event("content", "x")
    ]


def test_collect_rejects_args_before_call() -> None:
    with pytest.raises(ValueError):
        collect([Event("tool_args", "{}", 0)])
    with pytest.raises(ValueError):
        collect([Event("tool_call", index=0, name="f"), Event("tool_call", index=0, name="g")])


def test_make_parser_names() -> None:
    assert set(PARSER_NAMES) == {"tool", "reasoning"}
    for tool in PARSER_NAMES["tool"]:
        for reasoning in PARSER_NAMES["reasoning"]:
            assert isinstance(make_parser(tool, reasoning), OutputParser)
    with pytest.raises(ValueError, match="tool parser"):
        make_parser("auto", "think")
    with pytest.raises(ValueError, match="reasoning parser"):
        make_parser("hermes", "deepseek_r1")


@pytest.mark.parametrize(
    "model_type, template, want",
    [
        ("gpt_oss", None, ("harmony", "harmony")),
        ("deepseek_v3", "anything", ("deepseek_v3", "think")),
        ("glm4_moe", None, ("glm45", "think")),
        ("qwen3_moe", "<tool_call>\n<function=x>\n<think>", ("qwen3_coder", "think")),
        ("qwen3_moe", "{{ '<tool_call>' }} <think>", ("hermes", "think")),
        ("qwen2_moe", "{{ '<tool_call>' }}", ("hermes", "none")),
        ("mixtral", "[INST]", ("none", "none")),
        ("mixtral", None, ("none", "none")),
    ],
)
def test_auto_parsers(model_type: str, template: str | None, want: tuple[str, str]) -> None:
    assert auto_parsers(model_type, template) == want
