"""TokenConstraint: a per-request restriction of the next token (structured outputs: JSON schemas,
grammars, forced tool calls). The engine asks it for the allowed tokens before each sample of that
request and reports the token it sampled; the server supplies implementations (e.g. llguidance).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class TokenConstraint(ABC):
    @abstractmethod
    def allowed(self, vocab_size: int) -> torch.Tensor | None:
        """Bool mask [vocab_size] of the tokens that may come next; None: no restriction this step."""

    @abstractmethod
    def accept(self, token: int) -> None:
        """The engine sampled ``token`` (always one that ``allowed`` permitted)."""

    def finished(self) -> bool:
        """The constrained text is complete: the engine ends the sequence (finish_reason "stop")."""
        return False


def mask_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """logits [V] with every token outside ``allowed`` [V'] (V' may be shorter: padding ids) at -inf.
    When nothing is allowed the logits are returned unchanged (the constraint has failed; the caller
    ends the sequence)."""
    n = min(logits.shape[-1], allowed.shape[-1])
    keep = torch.zeros(logits.shape[-1], dtype=torch.bool)
    keep[:n] = allowed[:n]
    if not bool(keep.any()):
        return logits
    return logits.masked_fill(~keep, float("-inf"))
