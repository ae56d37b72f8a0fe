"""Incremental model-output parsers: text deltas of one response -> reasoning, content and
tool-call events (``Event``), for the OpenAI / Anthropic adapters of the server.

``make_parser(tool, reasoning)`` builds one ``OutputParser`` per response; ``auto_parsers`` picks
the names from a checkpoint; ``collect`` merges events for non-streaming answers.

Files: base (Event, OutputParser, marker scanning), reasoning (``<think>``), tool_formats (each
family's call syntax), tool_calls (the call stage), pipeline (reasoning then calls), harmony
(GPT-OSS), collect, registry (names, make_parser, auto_parsers).
"""

from .base import Event, OutputParser
from .collect import Collected, collect
from .registry import MARKERS, PARSER_NAMES, auto_parsers, make_parser

__all__ = ["PARSER_NAMES", "Collected", "Event", "OutputParser", "auto_parsers", "collect", "make_parser"]
