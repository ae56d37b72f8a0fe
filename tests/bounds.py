"""Tolerances of float32 comparisons, derived from the arithmetic (never from one machine's
result), so the suite passes on AVX2, AVX-512 and NEON alike (other summation orders, FMA, vector
widths).

A float32 sum of n products, in any order, with or without FMA, is within
gamma(n) * sum |w_i x_i| of the exact sum, gamma(n) = n u / (1 - n u), u = 2^-24 (Higham, Accuracy
and Stability of Numerical Algorithms, §3.1; as ft-kernels tests/fp32_bounds.py).

Whole-model logits (``logits_tol``): two float32 evaluations of the same model (engine vs engine
with other chunking / kernels / caches, or engine vs transformers) each differ from the exact
logits by the rounding of every accumulation a value passes through. To first order the relative
errors of stacked stages add, and the RMS norms and the residual stream pass a relative error on
without amplifying it, so with K the longest accumulation and the error measured against the logit
scale max |logit|:

    |a - b| <= 2 * (S * L + 2) * gamma(K) * max |logit|

- 2: both runs err (|a - b| <= |a - exact| + |b - exact|).
- S = 11 rounded accumulations per decoder layer: attention norm, q/k/v projection, q.k, softmax
  sum, p.v, output projection; MLP norm, router, gate/up, down, the weighted sum over the top-k
  experts (exp, rsqrt and divisions add a few u each, below gamma(K) for K >= 16). L = layers.
- 2: the final norm and the LM head.
- K = the longest sum: hidden size, heads * head dim, the MLP / expert intermediate sizes in use,
  the key/value dims of linear attention or MLA, and the context (p.v sums over every key).
- Sum |w x| is taken as max |logit| (the bound is stated on the logit scale, not per element).

Strength: for the tiny test models (L 2..4, K 64..300) this is 1.8e-4..1.6e-3 of max |logit| (the
demo model, 65 tokens: 7e-4), while a real bug (a wrong mask or position, a dropped or misrouted
expert, a stale cache page) moves logits by 1e-2..1 of max |logit|: 6x or more below any such bug.
Measured on AVX2 (window state, gpt_oss, chunk 3): 3.5e-6 of the scale; on AVX-512, 4.9e-6
(the issue's 2.2e-5 at max |logit| 4.5), against a bound of 2.7e-4.
"""

from __future__ import annotations

import torch

U = 2.0**-24
STAGES_PER_LAYER = 11


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def longest_sum(cfg, tokens: int) -> int:
    """K of ``cfg`` (a ft_core ModelConfig) over ``tokens`` of context: the longest fp32 sum."""
    dims = [cfg.hidden_size, cfg.num_heads * cfg.head_dim, tokens]
    if any(cfg.moe_layers):
        dims += [cfg.moe.intermediate, cfg.moe.shared_intermediate, cfg.moe.num_experts]
    if not all(cfg.moe_layers):
        dims.append(cfg.dense_intermediate)
    if cfg.mla is not None:
        dims += [cfg.mla.kv_lora_rank, cfg.mla.q_lora_rank or 0, cfg.num_heads * cfg.mla.v_head_dim]
    if cfg.linear is not None:
        dims += [cfg.linear.conv_dim, cfg.linear.v_heads * cfg.linear.v_dim]
    return max(dims)


def logits_tol(cfg, scale: float, tokens: int) -> float:
    """The largest |a - b| of two float32 evaluations of ``cfg``'s logits (module docstring):
    2 (S L + 2) gamma(K) ``scale``; ``scale``: max |logit| of the reference, ``tokens``: the
    context length."""
    return 2 * (STAGES_PER_LAYER * cfg.num_layers + 2) * gamma(longest_sum(cfg, tokens)) * scale


def assert_logits_close(
    got: torch.Tensor, want: torch.Tensor, cfg, tokens: int | None = None
) -> None:
    """``got`` and ``want`` logits [T, V] (or any shape) of ``cfg`` within ``logits_tol``;
    ``tokens``: the longest context of the rows (default: T, as ``Engine.score`` returns)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    got, want = got.float(), want.float()
    scale = want.abs().max().item()
    tol = logits_tol(cfg, scale, tokens if tokens is not None else want.shape[0])
    err = (got - want).abs().max().item()
    assert err <= tol, (
        f"max |a - b| {err:.3g} > {tol:.3g} (max |logit| {scale:.3g}; tests/bounds.py)"
    )


def attention_tol(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    sinks: torch.Tensor | None = None,
) -> float:
    """Largest |a - b| of two float32 evaluations of softmax(scale q k^T (+ sink)) v.

    q [..., Lq, D], k/v [..., Lk, D] (broadcast over heads). Each score errs by at most
    e_s = gamma(D) scale max(|q| |k|^T) (+ u |sink|); softmax maps a score error e_s to at most
    2 e_s of probability mass (|d p|_1 <= 2 max |d s|), its normalising sum over Lk + 1 terms adds
    gamma(Lk + 1), and p.v another gamma(Lk); both runs err (x 2):
    2 max|v| (2 e_s + 2 gamma(Lk + 1) + 4 u).
    A wrong mask or a dropped key changes outputs by O(max |v| / Lk), far above this."""
    D, Lk = q.shape[-1], k.shape[-2]
    qk = (
        q.abs().double() @ k.abs().double().transpose(-1, -2).unsqueeze(-3)
        if q.dim() == k.dim() + 1
        else q.abs().double() @ k.abs().double().transpose(-1, -2)
    )
    e_sink = U * sinks.abs().max().item() if sinks is not None else 0.0
    e_s = gamma(D) * scale * qk.max().item() + e_sink
    return 2 * v.abs().max().item() * (2 * e_s + 2 * gamma(Lk + 1) + 4 * U)
