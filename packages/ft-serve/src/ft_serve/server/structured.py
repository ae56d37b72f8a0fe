"""Structured outputs with llguidance: JSON schemas (response_format, output formats) and forced tool
calls become per-request TokenConstraints that the engine applies before each sample.

    g = Grammars(engine)
    c = g.json(schema)                                   # any JSON value of ``schema``
    c = g.tool_calls(tools, name=None, parallel=True)    # hermes ``<tool_call>{...}</tool_call>`` blocks
    c = g.forced_calls("qwen3_coder", tools, name, parallel, budget)  # any format with a grammar
"""

from __future__ import annotations

import json
import logging

import llguidance as llg
import numpy as np
import torch

from ft_core.constraint import TokenConstraint

from ft_serve.server import tool_grammars
from ft_serve.server.errors import bad_request

log = logging.getLogger("ft.serve")

_COMPACT = tool_grammars.COMPACT
# The formats whose whole forced call is a grammar (hermes: ``tool_calls``; harmony: the opening only).
FORCED_FORMATS = ("hermes", "qwen3_coder", "glm45", "deepseek_v3", "harmony")
_END_MARK = {"deepseek_v3": tool_grammars.DS_SEP, "harmony": "<|call|>"}  # the format's marker (else </tool_call>)


class GrammarConstraint(TokenConstraint):
    """One llguidance matcher: the allowed next tokens from its bitmask; finished once the grammar is
    complete and only end-of-sequence remains (or the matcher stopped)."""

    def __init__(self, tokenizer: llg.LLTokenizer, grammar: str, vocab_size: int, what: str, param: str):
        self.m = llg.LLMatcher(tokenizer, grammar)
        if self.m.is_error():
            raise bad_request(f"{what} cannot be used for constrained decoding: {self.m.get_error()}", param)
        self.vocab = vocab_size

    def allowed(self, vocab_size: int) -> torch.Tensor | None:
        if self.m.is_error():
            return None
        bits = np.unpackbits(np.frombuffer(self.m.compute_bitmask(), dtype=np.uint8), bitorder="little")
        return torch.from_numpy(bits[: min(vocab_size, bits.size)].astype(bool))

    def accept(self, token: int) -> None:
        self.m.consume_token(token)

    def finished(self) -> bool:
        return self.m.is_stopped() or self.m.is_error()


class Grammars:
    """Builds constraints for one engine; the llguidance tokenizer is made once, on first use."""

    def __init__(self, engine):
        self.engine = engine
        self._tok: llg.LLTokenizer | None = None

    @property
    def tokenizer(self) -> llg.LLTokenizer:
        if self._tok is None:
            eng = self.engine
            self._tok = llg.LLTokenizer(eng.tokenizer._tok.to_str(), n_vocab=eng.model_config.vocab_size,
                                        eos_token=sorted(eng.eos_ids))
        return self._tok

    def _make(self, grammar: str, what: str, param: str) -> GrammarConstraint:
        return GrammarConstraint(self.tokenizer, grammar, self.engine.model_config.vocab_size, what, param)

    def json(self, schema: dict | None, param: str = "response_format") -> GrammarConstraint:
        """Any JSON value matching ``schema`` (None: any JSON object)."""
        schema = dict(schema) if isinstance(schema, dict) else {"type": "object"}
        schema.setdefault("x-guidance", _COMPACT)
        try:
            grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        except (ValueError, TypeError) as e:
            raise bad_request(f"the JSON schema is not usable: {e}", param) from None
        return self._make(grammar, "the JSON schema", param)

    def tool_calls(self, tools: list[dict], name: str | None, parallel: bool) -> GrammarConstraint | None:
        """Hermes-format calls after the forced ``<tool_call>\\n``: ``{"name": N, "arguments": {...}}`` with
        the arguments schema of the named tool (or of any tool), then ``</tool_call>``; with ``parallel``
        further calls may follow. None when the tokenizer lacks ``</tool_call>``."""
        close = self.engine.tokenizer.token_to_id("</tool_call>")
        open_ = self.engine.tokenizer.token_to_id("<tool_call>")
        if close is None or open_ is None:
            return None
        chosen = [t["function"] for t in tools if name is None or t["function"]["name"] == name]
        variants = []
        for f in chosen:
            params = f.get("parameters") if isinstance(f.get("parameters"), dict) else {"type": "object"}
            variants.append({"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": params},
                             "required": ["name", "arguments"], "additionalProperties": False})
        schema = {"anyOf": variants, "x-guidance": _COMPACT} if len(variants) > 1 else {**variants[0], "x-guidance": _COMPACT}
        more = f'("\\n" <[{open_}]> "\\n" call "\\n" <[{close}]>)*' if parallel and name is None else ""
        lark = f'start: call "\\n" <[{close}]> {more}\ncall: %json {json.dumps(schema)}\n'
        grammar = llg.LLMatcher.grammar_from_lark(lark)
        err = llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
        if err:  # a schema llguidance cannot take: constrain to the call's shape with free-form arguments
            log.warning("tool schema not usable for constrained decoding (%s); arguments left free-form", err)
            for v in variants:
                v["properties"]["arguments"] = {"type": "object"}
            return self.tool_calls([{"function": {"name": v["properties"]["name"]["const"]}} for v in variants],
                                   None if name is None else name, parallel)
        return self._make(grammar, "the tools' parameter schemas", "tools")

    def forced_calls(self, fmt: str, tools: list[dict], name: str | None, parallel: bool,
                     budget: int) -> GrammarConstraint | None:
        """The rest of a forced call in tool-call format ``fmt`` after its forced opening (``service._FORCED``:
        for a named tool qwen3_coder and glm45 force its header too); None for a format without a grammar
        or a tokenizer without its markers. ``budget``: the request's max tokens; one raw string value
        gets at most budget / (the function's free string parameters + 1) characters, so the call
        closes within it (JSON values of a schema are not bounded)."""
        if fmt == "hermes":
            return self.tool_calls(tools, name, parallel)
        if fmt not in FORCED_FORMATS:
            return None
        added = {t.content: i for i, t in self.engine.tokenizer._tok.get_added_tokens_decoder().items()}
        if _END_MARK.get(fmt, "</tool_call>") not in added:
            return None

        def chars(f: dict) -> int:
            n = sum(1 for _, s, _ in tool_grammars.props(f) if tool_grammars.free_string(s))
            return max(1, budget // (n + 1))

        def mark(text: str) -> str:
            return f"<[{added[text]}]>" if text in added else tool_grammars.lit(text)

        chosen = [t["function"] for t in tools if name is None or t["function"]["name"] == name]
        for loose in (False, True):
            spec = tool_grammars.CallSpec(chosen, name is not None and fmt != "deepseek_v3",
                                          parallel and name is None and fmt != "harmony", chars, mark, loose)
            if fmt == "deepseek_v3":
                lark = tool_grammars.deepseek_v3(spec, "```json" in (self.engine.tokenizer.chat_template or ""))
            else:
                lark = tool_grammars.BUILDERS[fmt](spec)
            grammar = llg.LLMatcher.grammar_from_lark(lark)
            err = llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
            if not err:
                return self._make(grammar, "the tools' parameter schemas", "tools")
            log.warning("%s tool-call grammar not usable%s (%s)", fmt, "" if loose else "; arguments left free-form", err)
        return None
