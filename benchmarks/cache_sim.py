"""Replay of routing traces through expert-cache policies; shared by bench_cache_policies.py and
bench_miss_split.py (import it by path; benchmarks/ is not a package).

A trace is the engine's ``--record-routing`` JSON-lines file, flattened into layer steps in the
engine's clock order (forward by forward, MoE layer 0..L-1 inside each): (is_decode, layer, ids),
ids = the flat ids (layer * E + expert) of every route of that layer step, all tokens together.
Every replay returns per decode layer step (distinct, m, q): distinct ids routed, misses (distinct
ids not resident at the start of the step) and fills (misses copied in; the rest run on the CPU).

Prefill steps either warm the caches ("warm": replayed with the same policy, not counted) or are
skipped ("skip"). The engine's prefill double-buffering (fill every miss, prefetch layer l+1 whole,
when S >= 2E) is not modelled: after a prefill its cache can differ a little from "warm".
Global LRU (fill / hybrid) replays through ft_core's own ExpertCache, so it is the engine's LRU.
"""

from __future__ import annotations

import heapq
import json
import os
from collections import Counter
from dataclasses import dataclass, field

import torch

from ft_core.experts.bank import ExpertBank
from ft_core.experts.cache import ExpertCache
from ft_core.experts.cached import q_policy


@dataclass
class Trace:
    num_experts: int  # E
    num_layers: int  # L (MoE layers)
    steps: list[tuple[bool, int, list[int]]]  # (is_decode, layer, flat ids of every route)
    decode_tokens: int  # tokens over all decode forwards
    source: str

    @property
    def num_ids(self) -> int:
        return self.num_layers * self.num_experts


@dataclass
class Result:
    per_step: list[tuple[int, int, int]] = field(
        default_factory=list
    )  # decode layer steps: (distinct, m, q)

    def add(self, distinct: int, m: int, q: int) -> None:
        self.per_step.append((distinct, m, q))

    distinct = property(lambda self: sum(s[0] for s in self.per_step))
    misses = property(lambda self: sum(s[1] for s in self.per_step))
    fills = property(lambda self: sum(s[2] for s in self.per_step))
    miss_rate = property(lambda self: self.misses / max(1, self.distinct))
    cpu_fraction = property(
        lambda self: (self.misses - self.fills) / max(1, self.misses)
    )  # of misses


def load_trace(path: str, domain: str | None = None) -> Trace:
    """A routing trace from ``path``: ft's ``--record-routing`` JSON lines; a recorded trace of a trained model as
    a ``.npz`` of per-(token, layer) rows (the OLMoE format of ../shared/traces/README.md: ``layer_index``,
    ``requested_expert_ids``, ``domain_id``, ``sequence_id``); or per-(problem, token, layer) JSON lines
    (``{"dataset", "problem_id", "layer", "experts", "token_idx"}``, the Mixtral format; a directory: every
    ``*_routing.jsonl`` in it). Those two are decode-only; ``domain`` keeps one part of them (npz: "general" =
    domain 0, "code" = 1; JSON lines: a dataset name)."""
    if path.endswith(".npz"):
        return _load_npz(path, domain)
    files = (
        sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith("_routing.jsonl"))
        if os.path.isdir(path)
        else [path]
    )
    if not files:
        raise ValueError(f"{path}: no *_routing.jsonl files")
    with open(files[0]) as f:
        first = json.loads(next((line for line in f if line.strip()), "{}"))
    if "problem_id" in first and "experts" in first:
        return _load_token_layer_jsonl(files, path, domain)
    return _load_ft_jsonl(path)


def _load_ft_jsonl(path: str) -> Trace:
    steps, E, L, dec_tokens = [], None, None, 0
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            E = E or r["num_experts"]
            L = L or len(r["layers"])
            if r["num_experts"] != E or len(r["layers"]) != L:
                raise ValueError(f"{path}: forwards of different models in one trace")
            dec = r["phase"] == "decode"
            dec_tokens += sum(r["seq_tokens"]) if dec else 0
            for layer, toks in enumerate(r["layers"]):
                steps.append((dec, layer, [i for tok in toks for i in tok]))
    if not steps:
        raise ValueError(f"{path}: empty trace")
    return Trace(E, L, steps, dec_tokens, path)


DOMAINS = {"general": 0, "code": 1}  # the OLMoE trace's domain_id


def _load_npz(path: str, domain: str | None) -> Trace:
    import numpy as np

    z = np.load(path)
    layer, ids = z["layer_index"].astype(np.int64), z["requested_expert_ids"].astype(np.int64)
    L, E = int(layer.max()) + 1, int(ids.max()) + 1  # the model's, whatever domain
    if domain is not None:
        if domain not in DOMAINS:
            raise ValueError(f"--domain {domain!r}: the npz trace has {', '.join(DOMAINS)}")
        keep = z["domain_id"] == DOMAINS[domain]
        layer, ids = layer[keep], ids[keep]
    if len(layer) % L or not (layer.reshape(-1, L) == np.arange(L)).all():
        raise ValueError(f"{path}: rows are not whole tokens of layers 0..{L - 1} in order")
    flat = (ids + layer[:, None] * E).tolist()
    steps = [(True, int(lay), row) for lay, row in zip(layer.tolist(), flat)]
    return Trace(E, L, steps, len(steps) // L, path + (f" ({domain})" if domain else ""))


def _load_token_layer_jsonl(files: list[str], path: str, domain: str | None) -> Trace:
    tokens: dict[tuple, dict[int, list[int]]] = {}  # (dataset, problem, token) -> layer -> experts
    E = L = 0
    for fn in files:
        with open(fn) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                E, L = (
                    max(E, max(r["experts"]) + 1),
                    max(L, r["layer"] + 1),
                )  # the model's, whatever domain
                if domain is None or r["dataset"] == domain:
                    tokens.setdefault((r["dataset"], r["problem_id"], r["token_idx"]), {})[
                        r["layer"]
                    ] = r["experts"]
    order = sorted(tokens)  # problem by problem, tokens in order
    steps = []
    whole = 0
    for key in order:
        layers = tokens[key]
        if (
            len(layers) != L
        ):  # tokens with an incomplete layer set (a few in the Mixtral trace) are skipped
            continue
        whole += 1
        steps += [(True, lay, [lay * E + e for e in layers[lay]]) for lay in range(L)]
    if not steps:
        raise ValueError(
            f"{path}: no token with all {L} layers" + (f" in dataset {domain!r}" if domain else "")
        )
    return Trace(E, L, steps, whole, path + (f" ({domain})" if domain else ""))


def synthetic_trace(
    layers: int = 48,
    experts: int = 128,
    top_k: int = 8,
    decode_steps: int = 256,
    prefill_tokens: int = 64,
    zipf: float = 1.0,
    seed: int = 0,
) -> Trace:
    """Zipf-like routing: in each layer expert of popularity rank r (a seeded random permutation) is
    drawn with weight 1/r**zipf, top_k distinct per token, tokens independent. One prefill forward of
    ``prefill_tokens`` then ``decode_steps`` decode forwards of one token."""
    g = torch.Generator().manual_seed(seed)
    w = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** zipf
    probs = torch.stack(
        [w[torch.argsort(torch.randperm(experts, generator=g))] for _ in range(layers)]
    )  # [L, E]
    steps = []
    for t, dec in [(prefill_tokens, False)] + [(1, True)] * decode_steps:
        for layer in range(layers):
            ids = torch.multinomial(
                probs[layer].expand(t, experts), top_k, replacement=False, generator=g
            )
            steps.append((dec, layer, (ids + layer * experts).flatten().tolist()))
    src = (
        f"synthetic (zipf {zipf}, L={layers}, E={experts}, top-{top_k}, {prefill_tokens}-token prefill, "
        f"{decode_steps} decode steps, seed {seed})"
    )
    return Trace(experts, layers, steps, decode_steps, src)


def _replayed(trace: Trace, prefill: str):
    if prefill not in ("warm", "skip"):
        raise ValueError(f"prefill must be warm or skip, not {prefill!r}")
    return [s for s in trace.steps if s[0] or prefill == "warm"]


def _bank(n_ids: int, experts: int) -> ExpertBank:
    """A one-element-per-row fake bank: ExpertCache needs one for its slot storage (and its layer size), not the
    weights."""
    return ExpertBank(
        "f32",
        num_experts=experts,
        hidden=1,
        inter=1,
        act="swiglu",
        tensors={"w13": torch.zeros(n_ids, 1, 1), "w2": torch.zeros(n_ids, 1, 1)},
    )


def replay_lru(
    trace: Trace,
    slots: int,
    policy: str = "fill",
    ratio: float | None = None,
    prefill: str = "warm",
    victim: str = "lru",
) -> Result:
    """The engine's global cache (ft_core ExpertCache.control) with q from ft_core's q_policy and the victim
    policy ``victim`` (ExpertCache's lru, reuse or nextuse)."""
    cache = ExpertCache(_bank(trace.num_ids, trace.num_experts), slots, policy=victim)
    q_of_m, res = q_policy(policy, ratio), Result()
    for dec, _, ids in _replayed(trace, prefill):
        r = cache.control(torch.tensor(ids, dtype=torch.int64), q_of_m)
        if dec:
            res.add(len(set(ids)), r.misses, int(r.copy_ids.numel()))
    return res


def route_counts(trace: Trace, source: str) -> Counter:
    """Routes per flat id over the whole trace ("trace"), its prefill forwards or its decode forwards."""
    if source not in ("trace", "prefill", "decode"):
        raise ValueError(f"static source must be trace, prefill or decode, not {source!r}")
    c = Counter()
    for dec, _, ids in trace.steps:
        if source == "trace" or dec == (source == "decode"):
            c.update(ids)
    return c


def _top(counts: Counter, ids, n: int) -> set[int]:
    return set(
        sorted(ids, key=lambda i: (-counts[i], i))[:n]
    )  # most routed, ties by lower id (as the engine)


def static_set(
    trace: Trace, slots: int, source: str = "trace", per_layer: bool = False
) -> set[int]:
    """KTransformers-like: the ``slots`` most-routed ids of all layers; llama.cpp-like (per_layer):
    layer l gets slots // L slots (+1 for the first slots % L layers) holding its most-routed experts."""
    counts, E, L = route_counts(trace, source), trace.num_experts, trace.num_layers
    if not per_layer:
        return _top(counts, range(trace.num_ids), slots)
    hot: set[int] = set()
    for layer in range(L):
        hot |= _top(counts, range(layer * E, (layer + 1) * E), slots // L + (layer < slots % L))
    return hot


def replay_static(trace: Trace, hot: set[int]) -> Result:
    """A frozen hot set: every decode miss runs on the CPU (q = 0); prefill does not matter."""
    res = Result()
    for dec, _, ids in trace.steps:
        if dec:
            u = set(ids)
            res.add(len(u), len(u - hot), 0)
    return res


def replay_belady(trace: Trace, slots: int, prefill: str = "warm") -> Result:
    """Belady's optimum for one global cache of ``slots`` that fills every miss (the lower bound of
    fill-everything policies): victims are resident ids not used in this step whose next use is
    farthest; when the misses outnumber the free slots, those used soonest are filled."""
    steps = [(dec, set(ids)) for dec, _, ids in _replayed(trace, prefill)]
    never, last = len(steps), {}
    nxt: list[dict[int, int]] = [{}] * len(steps)
    for t in range(len(steps) - 1, -1, -1):  # next use after step t of each id of step t
        nxt[t] = {i: last.get(i, never) for i in steps[t][1]}
        for i in steps[t][1]:
            last[i] = t
    slots = min(slots, trace.num_ids)
    resident: dict[int, int] = {}  # id -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, id), stale entries skipped lazily
    res = Result()
    for t, (dec, u) in enumerate(steps):
        hits = [i for i in u if i in resident]
        misses = sorted((i for i in u if i not in resident), key=lambda i: (nxt[t][i], i))
        for i in hits:
            resident[i] = nxt[t][i]
            heapq.heappush(heap, (-nxt[t][i], i))
        empty = slots - len(resident)
        q = min(len(misses), empty + len(resident) - len(hits))
        kept = []
        for _ in range(q - max(0, empty)):  # evictions
            while True:
                nu, i = heapq.heappop(heap)
                if resident.get(i) != -nu:
                    continue  # stale
                if i in u:
                    kept.append((nu, i))
                    continue
                del resident[i]
                break
        for e in kept:
            heapq.heappush(heap, e)
        for i in misses[:q]:
            resident[i] = nxt[t][i]
            heapq.heappush(heap, (-nxt[t][i], i))
        if dec:
            res.add(len(u), len(misses), q)
    return res


def slots_for(trace: Trace, fraction: float) -> int:
    return max(1, min(trace.num_ids, round(fraction * trace.num_ids)))
