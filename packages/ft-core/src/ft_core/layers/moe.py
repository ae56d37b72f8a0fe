"""MoE layer: router, routed experts on the shared ExpertBank via an ExpertBackend, shared expert.

The layer owns its router and shared-expert weights and delegates the routed math (DESIGN §8.4).
Legend: T = tokens, H = hidden, k = experts per token.
"""

from __future__ import annotations

import torch

from ft_core.experts import ExpertBackend, ExpertBank
from ft_core.layers.basic import DenseMLP, sigmoid_mul
from ft_core.layers.dense import linear
from ft_core.layers.router import Router
from ft_core.model_config import ModelConfig


class MoELayer:
    def __init__(
        self,
        r,
        cfg: ModelConfig,
        prefix: str,
        router_name: str,
        moe_index: int,
        bank: ExpertBank,
        backend: ExpertBackend,
    ):
        m, H = cfg.moe, cfg.hidden_size
        self.cfg, self.bank, self.backend = cfg, bank, backend
        self.base = moe_index * m.num_experts  # flat id of this layer's expert 0
        w = r.tensor(f"{prefix}.{router_name}.weight", (m.num_experts, H))
        b = r.tensor(f"{prefix}.{router_name}.bias", (m.num_experts,)) if m.router_bias else None
        corr = (
            r.tensor(
                f"{prefix}.{router_name}.e_score_correction_bias", (m.num_experts,), torch.float32
            )
            if m.score_correction_bias
            else None
        )
        self.router = Router(m, w, b, corr)
        self.shared = None
        if m.shared_intermediate:
            name = "shared_expert" if m.shared_gate else "shared_experts"
            self.shared = DenseMLP(r, f"{prefix}.{name}", H, m.shared_intermediate)
            self.shared_gate = (
                r.tensor(f"{prefix}.shared_expert_gate.weight", (1, H)) if m.shared_gate else None
            )

    def __call__(self, x: torch.Tensor, routing_log: list | None = None) -> torch.Tensor:
        """x [T, H] -> [T, H] in x's dtype. ``routing_log`` (if given) receives this layer's flat ids [T, k]."""
        tok, eid, gate = self.router.routes(x, self.base)
        if routing_log is not None:
            routing_log.append(eid.view(x.shape[0], -1).tolist())
        if self.backend.host_only and x.device.type != "cpu":  # dense on a GPU, experts on the CPU
            y = self.backend.run(self.bank, x.cpu(), tok.cpu(), eid.cpu(), gate.cpu())
            y = y.to(x.device, x.dtype)
        else:
            y = self.backend.run(self.bank, x, tok, eid, gate).to(x.dtype)
        if self.shared is not None:
            s = self.shared(x)
            if self.shared_gate is not None:
                s = sigmoid_mul(s, linear(x, self.shared_gate))
            y = y + s
        return y
