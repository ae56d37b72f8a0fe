"""``ToolFamily``: everything one model family's tool-call syntax needs, from parsing to forcing.

A family either gives the shared tool-call stage its ``ToolFormat`` (markers and a body parser:
hermes, qwen3_coder, glm45, deepseek_v3) or parses the whole output itself (``output_parser``:
harmony). For tool_choice "required" / named, the service appends ``forced_opening(name)`` to the
prompt, and the structured-output layer constrains what follows with ``grammar(spec, template)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..base import OutputParser
from ..grammar import CallSpec
from ..tool_calls import ToolFormat


class ToolFamily(ABC):
    """One tool-call family (stateless; one instance in the registry).

    name: its ``--tool-call-parser`` name. markers: the special-token texts its parser reads (they
    stay in the decoded text). format: the shared stage's hook, or None when ``output_parser``
    parses everything. grammar_tokens: markers that must be added tokens of the tokenizer for a
    grammar of forced calls. names_in_opening: a named tool's header is in ``forced_opening(name)``.
    parallel: a forced grammar may hold more than one call.
    """

    name: str
    markers: tuple[str, ...]
    format: ToolFormat | None = None
    grammar_tokens: tuple[str, ...] = ()
    names_in_opening: bool = True
    parallel: bool = True

    def output_parser(
        self, *, starts_in_reasoning: bool, tools_enabled: bool
    ) -> OutputParser | None:
        """A parser of the whole output (reasoning included), or None: the staged parser with
        ``format``. starts_in_reasoning: the prompt opened the reasoning; tools_enabled: False
        leaves calls as content."""
        return None

    @abstractmethod
    def forced_opening(self, name: str | None) -> str:
        """Text appended to the prompt when a call is forced: tool_choice "required" (name None)
        or the tool ``name`` (its header too when ``names_in_opening``)."""

    @abstractmethod
    def grammar(self, spec: CallSpec, chat_template: str) -> str:
        """Lark (llguidance) of what follows ``forced_opening``: the calls of ``spec`` in this
        family's syntax, closed. chat_template: the template text (variants of one family)."""
