"""The gated delta rule through flash-linear-attention's Triton kernels (PyPI ``flash-linear-attention``,
import name ``fla``): adapters with the signatures, shapes and state layout of ``gated_delta.py``, whose
torch functions are their reference twins (tests compare them under TRITON_INTERPRET=1). Whether fla
can run here: ``ft_core/fla_check.py``.

fla takes time-first batches [B, T, H, D] and shares key head h among value heads h*r .. h*r + r - 1
(r = Hv / Hk), as ``repeat_interleave`` does in the torch form; q and k are L2-normalised in the kernel
with the same eps (x / sqrt(sum(x^2) + 1e-6)) and q is scaled by Dk^-0.5 (fla's default scale).
The short causal conv stays in torch (one depthwise conv1d; fla keeps a Kc-wide conv state, ours Kc-1).

Legend: L = tokens of one sequence, B = sequences, Hk/Hv = key/value heads, Dk/Dv = key/value dims.
"""

from __future__ import annotations

import torch

from ft_core.layers.gated_delta import CHUNK


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence, fla's chunked kernel: q, k [L, Hk, Dk], v [L, Hv, Dv], g (log decay, <= 0) and beta
    (post-sigmoid) [L, Hv], state [Hv, Dk, Dv] float32 (not modified). Returns o [L, Hv, Dv] float32 and
    the new state [Hv, Dk, Dv] float32. q, k, v, beta run in their dtype (bf16 on GPUs), g in float32.
    ``chunk``: 16, 32 or 64."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk

    o, S = fla_chunk(
        q[None],
        k[None],
        v[None],
        g.float()[None],
        beta[None],
        initial_state=state.float()[None],
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        chunk_size=chunk,
    )
    return o[0].float(), S[0]


def recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token by token, batched over sequences, fla's fused recurrent kernel: q, k [B, L, Hk, Dk],
    v [B, L, Hv, Dv], g, beta [B, L, Hv], state [B, Hv, Dk, Dv] float32 (not modified). Returns
    o [B, L, Hv, Dv] float32 and the new state [B, Hv, Dk, Dv] float32."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent

    # g and beta by keyword: fla's fifth positional parameter is the per-key gate gk
    o, S = fla_recurrent(
        q,
        k,
        v,
        g=g.float(),
        beta=beta,
        initial_state=state.float(),
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    return o.float(), S
