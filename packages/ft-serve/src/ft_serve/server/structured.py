"""Structured outputs with llguidance: JSON schemas (response_format, output formats) and forced tool
calls become per-request TokenConstraints that the engine applies before each sample.

    g = Grammars(engine)
    c = g.json(schema)                                   # any JSON value of ``schema``
    c = g.forced_calls("qwen3_coder", tools, name, parallel, budget)  # the rest of a forced call
"""

from __future__ import annotations

import json
import logging

import llguidance as llg
import numpy as np
import torch

from ft_core.constraint import TokenConstraint

from ft_serve.parsers.families import family
from ft_serve.parsers.grammar import COMPACT, CallSpec, lit
from ft_serve.parsers.params import free_string, props
from ft_serve.server.errors import bad_request

log = logging.getLogger("ft.serve")


class GrammarConstraint(TokenConstraint):
    """One llguidance matcher: the allowed next tokens from its bitmask; finished once the grammar is
    complete and only end-of-sequence remains (or the matcher stopped)."""

    def __init__(
        self, tokenizer: llg.LLTokenizer, grammar: str, vocab_size: int, what: str, param: str
    ):
        self.m = llg.LLMatcher(tokenizer, grammar)
        if self.m.is_error():
            raise bad_request(
                f"{what} cannot be used for constrained decoding: {self.m.get_error()}", param
            )
        self.vocab = vocab_size

    def allowed(self, vocab_size: int) -> torch.Tensor | None:
        if self.m.is_error():
            return None
        bits = np.unpackbits(
            np.frombuffer(self.m.compute_bitmask(), dtype=np.uint8), bitorder="little"
        )
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
            self._tok = llg.LLTokenizer(
                eng.tokenizer._tok.to_str(),
                n_vocab=eng.model_config.vocab_size,
                eos_token=sorted(eng.eos_ids),
            )
        return self._tok

    def _make(self, grammar: str, what: str, param: str) -> GrammarConstraint:
        return GrammarConstraint(
            self.tokenizer, grammar, self.engine.model_config.vocab_size, what, param
        )

    def json(self, schema: dict | None, param: str = "response_format") -> GrammarConstraint:
        """Any JSON value matching ``schema`` (None: any JSON object)."""
        schema = dict(schema) if isinstance(schema, dict) else {"type": "object"}
        schema.setdefault("x-guidance", COMPACT)
        try:
            grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        except (ValueError, TypeError) as e:
            raise bad_request(f"the JSON schema is not usable: {e}", param) from None
        return self._make(grammar, "the JSON schema", param)

    def forced_calls(
        self, fmt: str, tools: list[dict], name: str | None, parallel: bool, budget: int
    ) -> GrammarConstraint | None:
        """The rest of a forced call in tool-call family ``fmt`` after its ``forced_opening(name)``
        (the family's ``grammar``); None for a tokenizer without the family's ``grammar_tokens``.
        ``budget``: the request's max tokens; one raw string value gets at most budget / (the
        function's free string parameters + 1) characters, so the call closes within it (JSON values
        of a schema are not bounded). A schema llguidance cannot take: arguments left free-form."""
        fam = family(fmt)
        decoder = self.engine.tokenizer._tok.get_added_tokens_decoder()
        added = {t.content: i for i, t in decoder.items()}
        if not all(t in added for t in fam.grammar_tokens):
            return None

        def chars(f: dict) -> int:
            n = sum(1 for _, s, _ in props(f) if free_string(s))
            return max(1, budget // (n + 1))

        def mark(text: str) -> str:
            return f"<[{added[text]}]>" if text in added else lit(text)

        chosen = [t["function"] for t in tools if name is None or t["function"]["name"] == name]
        template = self.engine.tokenizer.chat_template or ""
        for loose in (False, True):
            spec = CallSpec(
                chosen,
                name is not None and fam.names_in_opening,
                parallel and name is None and fam.parallel,
                chars,
                mark,
                loose,
            )
            grammar = llg.LLMatcher.grammar_from_lark(fam.grammar(spec, template))
            err = llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
            if not err:
                return self._make(grammar, "the tools' parameter schemas", "tools")
            log.warning(
                "%s tool-call grammar not usable%s (%s)",
                fmt,
                "" if loose else "; arguments left free-form",
                err,
            )
        return None
