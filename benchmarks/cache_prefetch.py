"""Prefetch on top of the expert cache, replayed on a routing trace (imported by path, as cache_sim is): after
each decode layer step, the experts expected at the next layer are fetched before that layer runs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cache_sim import Result, Trace, _bank, _replayed
from ft_core.experts.cache import ExpertCache
from ft_core.experts.cached import q_policy


class NextLayerGuess:
    """Predicts which experts a token routes at MoE layer l + 1 from those it routed at layer l, knowing only
    routing (a recorded trace has no hidden states): score of e' = the mean over the token's experts e at l of
    P(e' at l + 1 | e at l), counted online over the steps replayed so far. (Adding the previous token's experts
    at l + 1 made it worse on the tuning slice.) The engine could do better with the next layer's router
    applied to the current hidden state; this is what ids alone give."""

    def __init__(self, layers: int, experts: int):
        self.counts = torch.zeros(layers, experts, experts)

    def guess(self, layer: int, local: list[int], n: int) -> list[int]:
        """The n likeliest local experts of layer + 1 given this token's ``local`` experts at ``layer``."""
        rows = self.counts[layer, local]
        return torch.topk(
            (rows / rows.sum(1, keepdim=True).clamp(min=1)).mean(0), n
        ).indices.tolist()

    def learn(self, layer: int, local: list[int], following: list[int]) -> None:
        """One token went from ``local`` at ``layer`` to ``following`` at layer + 1."""
        self.counts[layer, torch.tensor(local)[:, None], torch.tensor(following)[None, :]] += 1


@dataclass
class PrefetchResult(Result):
    prefetched: int = 0  # experts copied by prefetches (bytes = this x one expert's)
    used: int = 0  # of those, routed at the layer they were fetched for


def replay_prefetch(
    trace: Trace, slots: int, budget: int, victim: str = "reuse", prefill: str = "warm"
) -> PrefetchResult:
    """Fill-everything caching through the engine's ExpertCache with prefetch: after each decode layer step l
    (its routes known, layer l + 1 not yet run) the ``budget`` experts NextLayerGuess expects at l + 1 are looked
    up as a prefetch step (``control(observe=False)``: missing ones are copied in, evicting by ``victim``), so a
    prefetch counts only where it was issued before the layer that needed it. Decode forwards of one token
    each (as recorded traces are). Misses are those of the real steps; ``prefetched`` the copies prefetches made."""
    E, L = trace.num_experts, trace.num_layers
    cache = ExpertCache(_bank(trace.num_ids, E), slots, policy=victim)
    fill, guess, res = q_policy("fill", None), NextLayerGuess(L, E), PrefetchResult()
    prev: tuple[int, list[int]] | None = (
        None  # the previous step of this forward: (layer, local experts)
    )
    fetched: set[int] = set()
    for dec, layer, ids in _replayed(trace, prefill):
        r = cache.control(torch.tensor(ids, dtype=torch.int64), fill)
        local = sorted({i - layer * E for i in ids})
        if dec:
            res.add(len(local), r.misses, int(r.copy_ids.numel()))
            res.used += len(fetched & set(ids))
        fetched = set()
        if prev is not None and prev[0] == layer - 1:
            guess.learn(layer - 1, prev[1], local)
        prev = (layer, local)
        if dec and budget and layer + 1 < L:
            want = [(layer + 1) * E + e for e in guess.guess(layer, local, budget)]
            p = cache.control(torch.tensor(want, dtype=torch.int64), fill, observe=False)
            fetched = set(p.copy_ids.tolist())
            res.prefetched += len(fetched)
    return res
