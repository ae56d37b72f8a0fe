"""Forced-call grammars of the text-valued, DeepSeek and harmony formats (each family's ``grammar``
in parsers/families/, compiled by server/structured.py), token by token on each family's tiny
tokenizer: a good call is accepted and parses to valid arguments; a wrong function name, an unknown
parameter, a missing required one or an over-long string is refused."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from ft_core.tokenizer import Tokenizer
from ft_serve.parsers import collect, make_parser
from ft_serve.server.structured import Grammars

import tiny_tokenizers

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "alerts": {"type": "boolean"},
                },
                "required": ["city", "days"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}},
    },
]
WANT = {"city": "123", "days": 3, "unit": "celsius"}  # "123" is a string parameter: it stays text

# format: (tiny tokenizer family, forced opening, a good call, one with a wrong name, an unknown parameter,
# a missing required parameter)
Q = "<tool_call>\n"
G = "<tool_call>"
D = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
H = "<|channel|>commentary to=functions."
HM = " <|constrain|>json<|message|>"
CASES = {
    "qwen3_coder": (
        "qwen35",
        Q,
        (
            "<function=get_weather>\n<parameter=city>\n123\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
            "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>"
        ),
        "<function=get_wether>\n",
        "<function=get_weather>\n<parameter=town>\n",
        "<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>",
    ),
    "glm45": (
        "glm",
        G,
        (
            "get_weather\n<arg_key>city</arg_key>\n<arg_value>123</arg_value>\n<arg_key>days</arg_key>\n"
            "<arg_value>3</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>"
        ),
        "get_wether\n",
        "get_weather\n<arg_key>town</arg_key>",
        "get_weather\n<arg_key>days</arg_key>",
    ),
    "deepseek_v3": (
        "deepseek",
        D,
        (
            'get_weather<｜tool▁sep｜>{"city": "123", "days": 3, "unit": "celsius"}<｜tool▁call▁end｜>'
            "<｜tool▁calls▁end｜>"
        ),
        "get_wether<｜tool▁sep｜>",
        'get_weather<｜tool▁sep｜>{"town"',
        'get_weather<｜tool▁sep｜>{"days"',
    ),
    "harmony": (
        "harmony",
        H,
        "get_weather" + HM + '{"city": "123", "days": 3, "unit": "celsius"}<|call|>',
        "get_wether ",
        "get_weather" + HM + '{"town"',
        "get_weather" + HM + '{"days"',
    ),
}


@pytest.fixture(scope="module", params=list(CASES))
def fmt(request, tmp_path_factory):
    family = CASES[request.param][0]
    out = tmp_path_factory.mktemp(family)
    tiny_tokenizers.write_tokenizer(family, out)
    tok = Tokenizer.from_dir(out)
    engine = SimpleNamespace(
        tokenizer=tok,
        model_config=SimpleNamespace(vocab_size=tok.vocab_size),
        eos_ids=tok.eos_token_ids,
    )
    return request.param, Grammars(engine), tok


def accepted(c, tok, text: str) -> int:
    """How many of ``text``'s tokens the constraint takes; consumes them."""
    ids = tok.encode(text, add_special_tokens=False)
    n = c.m.validate_tokens(ids)
    for i in ids[:n]:
        c.accept(i)
    return n - len(ids)  # 0: all taken


def test_good_call_is_accepted_and_parses(fmt):
    name, grammars, tok = fmt
    _, opening, good, *_ = CASES[name]
    c = grammars.forced_calls(name, TOOLS, None, True, 256)
    assert accepted(c, tok, good) == 0 and c.m.is_accepting()
    parser = make_parser(name, "none", tools=TOOLS)
    got = collect(parser.feed(opening + good) + parser.finish())
    assert [(x["name"], json.loads(x["arguments"])) for x in got.tool_calls] == [
        ("get_weather", WANT)
    ]
    assert not got.content.strip()


@pytest.mark.parametrize(
    "bad", [3, 4, 5], ids=["wrong_name", "unknown_parameter", "missing_required"]
)
def test_bad_calls_are_refused(fmt, bad):
    name, grammars, tok = fmt
    c = grammars.forced_calls(name, TOOLS, None, True, 256)
    assert accepted(c, tok, CASES[name][bad]) < 0


def test_named_tool_only(fmt):
    """A named tool (qwen3_coder, glm45: its header is in the forced opening): only its parameters, one call."""
    name, grammars, tok = fmt
    c = grammars.forced_calls(name, TOOLS, "noop", True, 256)
    header = {
        "qwen3_coder": "",
        "glm45": "",
        "deepseek_v3": "noop<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
        "harmony": "{}",
    }[name]
    end = {
        "qwen3_coder": "</function>\n</tool_call>",
        "glm45": "</tool_call>",
        "deepseek_v3": "<｜tool▁calls▁end｜>",
        "harmony": "<|call|>",
    }[name]
    assert accepted(c, tok, header + end) == 0 and c.m.is_accepting()
    c = grammars.forced_calls(name, TOOLS, "noop", True, 256)
    other = {
        "qwen3_coder": "<parameter=city>",
        "glm45": "<arg_key>",
        "deepseek_v3": "get_weather",
        "harmony": '{"city"',
    }[name]
    assert accepted(c, tok, other) < 0


def test_string_values_are_bounded(fmt):
    """A raw string holds at most budget / (free string parameters + 1) characters: then it must close."""
    name, grammars, tok = fmt
    c = grammars.forced_calls(name, TOOLS, None, True, 40)  # city: 20 characters at most
    start = {
        "qwen3_coder": "<function=get_weather>\n<parameter=city>\n",
        "glm45": "get_weather\n<arg_key>city</arg_key>\n<arg_value>",
        "deepseek_v3": 'get_weather<｜tool▁sep｜>{"city": "',
        "harmony": "get_weather" + HM + '{"city": "',
    }[name]
    assert accepted(c, tok, start + "x" * 20) == 0
    assert accepted(c, tok, "x") < 0


@pytest.mark.parametrize("parallel", [True, False])
def test_parallel_calls_only_when_allowed(fmt, parallel):
    name, grammars, tok = fmt
    _, opening, good, *_ = CASES[name]
    two = {
        "qwen3_coder": good + "\n" + opening + good,
        "glm45": good + "\n" + opening + good,
        "deepseek_v3": good.replace("<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>") + good,
        "harmony": good + opening + good,
    }[name]
    c = grammars.forced_calls(name, TOOLS, None, parallel, 256)
    parallel = (
        parallel and name != "harmony"
    )  # harmony: <|call|> ends the turn, one call per message
    assert (accepted(c, tok, two) == 0) == parallel
    if parallel:
        parser = make_parser(name, "none", tools=TOOLS)
        got = collect(parser.feed(opening + two) + parser.finish())
        assert [json.loads(x["arguments"]) for x in got.tool_calls] == [WANT, WANT]
