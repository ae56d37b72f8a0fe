"""Sequence: one request's tokens, sampling state and status as the engine steps it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ft_core.sampling import SamplingParams


@dataclass
class Sequence:
    seq_id: int
    prompt_ids: list[int]
    params: SamplingParams
    output_ids: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose K/V are in the cache
    text: str = ""  # the completion text, set when the sequence finishes
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error" (NaN/inf) | None
    generator: torch.Generator | None = None
    cached_tokens: int = 0  # prompt tokens served from the prefix cache (hybrids: a state checkpoint) at first admission
    preemptions: int = 0  # times its KV was dropped to make room (then recomputed)
    state_slot: int | None = None  # live recurrent-state slot (hybrid models) while admitted
    want_all_logits: bool = False  # score(): keep logits of every prompt position
    logits: list[torch.Tensor] = field(default_factory=list)
    constraint: object = (
        None  # a ft_core.constraint.TokenConstraint restricting each next token, or None
    )
    stop_scan: object = None  # a ft_core.tokenizer.detok.StopScanner while stop strings are checked

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def token(self, i: int) -> int:
        """``all_ids[i]`` without building the joined list."""
        n = len(self.prompt_ids)
        return self.prompt_ids[i] if i < n else self.output_ids[i - n]

    @property
    def total_len(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def uncomputed(self) -> int:
        """Tokens still to run through the model before the next sample (prompt chunks or the last token)."""
        return self.total_len - self.num_computed


@dataclass(frozen=True)
class GenerationOutput:
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
