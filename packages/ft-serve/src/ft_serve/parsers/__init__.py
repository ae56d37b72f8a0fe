"""Incremental model-output parsers: text deltas of one response -> reasoning, content and
tool-call events (``Event``), for the OpenAI / Anthropic adapters of the server.

``make_parser(tool, reasoning)`` builds one ``OutputParser`` per response; ``auto_parsers`` picks
the names from a checkpoint; ``collect`` merges events for non-streaming answers.

Files: base (Event, OutputParser, marker scanning), reasoning (``<think>``), families/ (one file per
tool-call family: markers, body parser, forced opening and grammar; harmony parses GPT-OSS whole),
tool_calls (the shared call stage), params (tools' parameter schemas), grammar (Lark pieces of
forced calls), pipeline (reasoning then calls), collect, registry (names, make_parser,
auto_parsers).
"""

from .base import Event, OutputParser
from .collect import Collected, collect
from .registry import MARKERS, PARSER_NAMES, auto_parsers, make_parser

__all__ = [
    "MARKERS",
    "PARSER_NAMES",
    "Collected",
    "Event",
    "OutputParser",
    "auto_parsers",
    "collect",
    "make_parser",
]
