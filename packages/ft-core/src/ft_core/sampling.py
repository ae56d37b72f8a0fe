"""SamplingParams and the sampler: penalties, temperature, top-k / top-p / min-p, seeded draws.

Order (as vLLM): repetition / presence / frequency penalties on the logits, then temperature,
then top-k, top-p and min-p filters, then a draw from the sequence's own generator (so the same
seed gives the same output whatever else is in the batch). ``temperature == 0`` is greedy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ft_core.errors import RequestError


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int = 0  # 0 or -1: off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # HF style, over prompt and output tokens
    presence_penalty: float = 0.0  # OpenAI style, over output tokens
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True

    def __post_init__(self):
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        checks = [
            ("max_tokens", self.max_tokens >= 1, "must be >= 1"),
            ("temperature", self.temperature >= 0, "must be >= 0"),
            ("top_k", self.top_k >= -1, "must be -1, 0 (off) or positive"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("min_p", 0 <= self.min_p <= 1, "must be in [0, 1]"),
            ("repetition_penalty", self.repetition_penalty > 0, "must be > 0"),
            ("presence_penalty", -2 <= self.presence_penalty <= 2, "must be in [-2, 2]"),
            ("frequency_penalty", -2 <= self.frequency_penalty <= 2, "must be in [-2, 2]"),
            ("min_tokens", 0 <= self.min_tokens <= self.max_tokens, "must be in [0, max_tokens]"),
        ]
        for name, ok, why in checks:
            if not ok:
                raise RequestError(f"sampling parameter {name}={getattr(self, name)!r} {why}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def apply_penalties(
    logits: torch.Tensor, p: SamplingParams, prompt: list[int], output: list[int]
) -> torch.Tensor:
    """logits [V] float32 -> penalised copy."""
    if p.repetition_penalty != 1.0 and (prompt or output):
        ids = torch.tensor(sorted(set(prompt) | set(output)), dtype=torch.int64)
        sel = logits[ids]
        logits = logits.clone()
        logits[ids] = torch.where(sel > 0, sel / p.repetition_penalty, sel * p.repetition_penalty)
    if (p.presence_penalty or p.frequency_penalty) and output:
        counts = torch.bincount(torch.tensor(output), minlength=logits.shape[0]).float()
        logits = logits - p.frequency_penalty * counts - p.presence_penalty * (counts > 0).float()
    return logits


def filter_logits(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """Temperature-scaled logits [V] with top-k, top-p and min-p exclusions set to -inf."""
    logits = logits / p.temperature
    if p.top_k > 0 and p.top_k < logits.shape[0]:
        kth = torch.topk(logits, p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if p.top_p < 1.0:
        sorted_l, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_l, dim=-1)
        drop = probs.cumsum(-1) - probs > p.top_p  # keep the smallest prefix reaching top_p
        logits = logits.clone()
        logits[order[drop]] = float("-inf")
    if p.min_p > 0:
        probs = torch.softmax(logits, dim=-1)
        logits = logits.masked_fill(probs < p.min_p * probs.max(), float("-inf"))
    return logits


def sample_one(
    logits: torch.Tensor,
    p: SamplingParams,
    prompt: list[int],
    output: list[int],
    gen: torch.Generator | None,
    banned: list[int] | None = None,
) -> int:
    """Next token id from logits [V] float32 for one sequence. ``banned`` ids (EOS before min_tokens) get -inf."""
    logits = apply_penalties(logits, p, prompt, output)
    if banned:
        logits = logits.clone()
        logits[banned] = float("-inf")
    if p.greedy:
        return int(torch.argmax(logits))
    probs = torch.softmax(filter_logits(logits, p), dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))
