"""Parser names, ``make_parser`` and ``auto_parsers`` (picking parsers from a checkpoint)."""

from __future__ import annotations

from . import reasoning
from .base import OutputParser, PassStage
from .families import FAMILIES, NAMES, family
from .params import string_params
from .pipeline import StagedParser
from .reasoning import ThinkStage

PARSER_NAMES = {
    "tool": (*NAMES, "none"),
    "reasoning": ("think", "harmony", "none"),
}

# Every marker a parser reads: the special tokens that must stay in the decoded text (others are hidden).
MARKERS = frozenset(
    {reasoning.OPEN, reasoning.CLOSE, *(m for f in FAMILIES.values() for m in f.markers)}
)


def make_parser(
    tool_parser: str,
    reasoning_parser: str,
    *,
    starts_in_reasoning: bool = False,
    tools_enabled: bool = True,
    tools: list[dict] | None = None,
) -> OutputParser:
    """A fresh parser for one response.

    tool_parser / reasoning_parser: concrete names from ``PARSER_NAMES`` ("auto" is resolved by
    the caller, e.g. with ``auto_parsers``); "harmony" in either means harmony for everything.
    starts_in_reasoning: the prompt already opened the reasoning block (``<think>``).
    tools_enabled: False for requests without tools: tool markers stay plain content.
    tools: the request's tools (OpenAI Chat form): string-typed parameters stay text in the formats that
    write values as text (qwen3_coder, glm45), even when they read as JSON.
    Raises ValueError for an unknown name.
    """
    if tool_parser not in PARSER_NAMES["tool"]:
        raise ValueError(
            f"unknown tool parser {tool_parser!r}; expected one of {PARSER_NAMES['tool']}"
        )
    if reasoning_parser not in PARSER_NAMES["reasoning"]:
        raise ValueError(
            f"unknown reasoning parser {reasoning_parser!r}; "
            f"expected one of {PARSER_NAMES['reasoning']}"
        )
    calls = tools_enabled and tool_parser != "none"
    name = "harmony" if reasoning_parser == "harmony" else tool_parser  # harmony parses everything
    fam = None if name == "none" else family(name)
    whole = fam and fam.output_parser(starts_in_reasoning=starts_in_reasoning, tools_enabled=calls)
    if whole is not None:
        return whole
    reasoning = ThinkStage(starts_in_reasoning) if reasoning_parser == "think" else PassStage()
    return StagedParser(reasoning, fam.format if calls else None, string_params(tools))


def auto_parsers(model_type: str, chat_template: str | None) -> tuple[str, str]:
    """(tool parser, reasoning parser) for a checkpoint, from its ``config.model_type`` and its
    chat template text (None when it has none)."""
    if model_type == "gpt_oss":
        return "harmony", "harmony"
    if model_type == "deepseek_v3":
        return "deepseek_v3", "think"
    if model_type == "glm4_moe":
        return "glm45", "think"
    template = chat_template or ""
    if "<|channel|>" in template:
        return "harmony", "harmony"
    if "<function=" in template:
        tool = "qwen3_coder"
    elif "<tool_call>" in template:
        tool = "hermes"
    else:
        tool = "none"
    return tool, "think" if "<think>" in template else "none"
