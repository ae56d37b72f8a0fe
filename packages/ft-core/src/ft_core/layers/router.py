"""MoE routers: token -> (top-k expert ids, gate weights), as each model family defines it.

Legend: T = tokens, E = experts, k = experts per token.
"""

from __future__ import annotations

import ft_kernels
import torch
import torch.nn.functional as F

from ft_core.layers.dense import linear
from ft_core.model_config import MoEConfig


class Router:
    """``softmax`` (Qwen/Mixtral/OLMoE), ``sigmoid_group`` (DeepSeek-V3/GLM-4.5), ``topk_softmax`` (GPT-OSS)."""

    def __init__(
        self,
        m: MoEConfig,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        correction: torch.Tensor | None,
    ):
        self.m, self.weight, self.bias, self.correction = m, weight, bias, correction

    def routes(self, x: torch.Tensor, base: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [T, H] -> the flat route lists of the expert backends: tok, eid (= base + expert) int [T*k], gate
        float32 [T*k]; token t's routes at t*k.., in the order of ``__call__``'s columns. On the CPU the
        softmax routers pick and weigh in one ``ft_kernels.route_topk`` call (torch.topk's picks, ties
        included), for the decode step's sake; the same routes as ``__call__`` otherwise."""
        m = self.m
        if m.router in ("softmax", "topk_softmax") and x.device.type == "cpu":
            b = None if self.bias is None else self.bias.to(x.dtype)
            logits = linear(x, self.weight.to(x.dtype), b).float()
            return ft_kernels.route_topk(
                logits, m.top_k, m.router, m.router == "softmax" and m.norm_topk_prob, base
            )
        ids, w = self(x)
        T, k = ids.shape
        # (expand, not repeat_interleave: nothing read back, so a captured decode step can hold it)
        tok = torch.arange(T, device=x.device)[:, None].expand(T, k).reshape(-1)
        return tok, ids.flatten() + base, w.float().flatten()

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, H] -> ids [T, k] int64, weights [T, k] float32."""
        m = self.m
        if m.router == "softmax":
            probs = F.softmax(linear(x, self.weight.to(x.dtype)).float(), dim=-1)
            w, ids = probs.topk(m.top_k, dim=-1)
            if m.norm_topk_prob:
                w = w / w.sum(-1, keepdim=True)
            return ids, w
        if m.router == "topk_softmax":
            logits = linear(x, self.weight.to(x.dtype), self.bias.to(x.dtype))
            top, ids = logits.topk(m.top_k, dim=-1)
            return ids, F.softmax(top.float(), dim=-1)
        scores = linear(x.float(), self.weight.float()).sigmoid()
        choice = scores + self.correction
        T, E, G = x.shape[0], m.num_experts, m.n_group
        group_scores = choice.view(T, G, E // G).topk(2, dim=-1)[0].sum(-1)
        gidx = group_scores.topk(m.topk_group, dim=-1, sorted=False)[1]
        gmask = torch.zeros_like(group_scores).scatter_(1, gidx, 1).bool()
        choice = choice.masked_fill(
            ~gmask[:, :, None].expand(T, G, E // G).reshape(T, E), float("-inf")
        )
        ids = choice.topk(m.top_k, dim=-1, sorted=False)[1]
        w = scores.gather(1, ids)
        if m.norm_topk_prob:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return ids, w * m.routed_scaling
