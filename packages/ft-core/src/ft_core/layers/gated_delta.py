"""The gated delta rule (Gated DeltaNet) in torch: a chunked form for prefill off the CPU and the
recurrent form for decode, which is the reference twin of the chunked one (tests compare them), plus
the short causal depthwise conv in front of it. A prefill on the CPU runs the rule token by token in
``ft_kernels.gdn_prefill`` (twin: ``ft_kernels.reference.gdn_prefill``, the recurrent form).

Per value head, with q and k L2-normalised and q scaled by Dk^-0.5, token t updates the state
S [Dk, Dv] and reads it:
    S <- exp(g_t) * S;   S <- S + k_t (beta_t * (v_t - S^T k_t))^T;   o_t = S^T q_t
Key heads are shared by Hv / Hk consecutive value heads.

Legend: L = tokens of one sequence, B = sequences, Hk/Hv = key/value heads, Dk/Dv = key/value dims,
C = conv channels, Kc = conv kernel, c = chunk length.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 64  # tokens per chunk of the chunked form


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim (as flash-linear-attention computes it)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def _prepare(q, k, v, g, beta):
    """[.., L, H*, D] inputs -> float32 [.., H, L, D] with key heads repeated per value head; q scaled."""
    hv, hk = v.shape[-2], k.shape[-2]
    if hv != hk:
        q, k = q.repeat_interleave(hv // hk, dim=-2), k.repeat_interleave(hv // hk, dim=-2)
    q, k = l2_normalize(q.float()), l2_normalize(k.float())
    q = q * q.shape[-1] ** -0.5
    tr = lambda x: x.transpose(-2, -3).contiguous()  # noqa: E731  [.., L, H, D] -> [.., H, L, D]
    return tr(q), tr(k), tr(v.float()), g.float().transpose(-1, -2), beta.float().transpose(-1, -2)


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence, chunked (WY form): q, k [L, Hk, Dk], v [L, Hv, Dv], g (log decay, <= 0) and beta
    [L, Hv], state [Hv, Dk, Dv] float32 (not modified). Returns o [L, Hv, Dv] float32 and the new state.

    Inside a chunk with cumulative log decay G_i, the pseudo-values u solve (I + A) u = beta v -
    beta exp(G) K S0 with A_ij = beta_i exp(G_i - G_j) k_i.k_j (j < i); then
    o_i = exp(G_i) q_i S0 + sum_{j<=i} exp(G_i - G_j) (q_i.k_j) u_j and
    S_end = exp(G_c) S0 + sum_j exp(G_c - G_j) k_j u_j^T.
    (I + A)^-1 is taken once a chunk (a triangular solve against the identity: c right-hand sides, not
    Dv + Dk), then applied to both parts of the right side by products.
    """
    L = q.shape[0]
    q, k, v, g, beta = _prepare(q, k, v, g, beta)  # [H, L, D], g/beta [H, L]
    pad = (-L) % chunk
    if pad:  # zero tokens leave the state unchanged (no decay, no update)
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    H, n = q.shape[0], (L + pad) // chunk
    q, k, v = (x.view(H, n, chunk, -1) for x in (q, k, v))
    G = g.view(H, n, chunk).cumsum(-1)  # [H, n, c]
    beta = beta.view(H, n, chunk)
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = (
        (G[..., :, None] - G[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    )  # [H, n, c, c]
    kb = k * beta[..., None]
    system = (
        kb @ k.transpose(-1, -2)
    ) * decay  # strictly-lower part is A; the diagonal is taken as 1
    eye = torch.eye(chunk, device=q.device)
    inv = torch.linalg.solve_triangular(system, eye, upper=False, unitriangular=True)  # (I + A)^-1
    u0 = inv @ (v * beta[..., None])  # u = u0 - w @ S0
    w = inv @ (kb * G.exp()[..., None])
    attn = (q @ k.transpose(-1, -2)) * decay  # [H, n, c, c], j <= i
    q_dec = q * G.exp()[..., None]
    k_dec = k * (G[..., -1:] - G).exp()[..., None]
    end_decay = G[..., -1].exp()[..., None, None]  # [H, n, 1, 1]
    out = torch.empty_like(v)
    S = state.float()
    for i in range(n):
        u = u0[:, i] - w[:, i] @ S
        out[:, i] = q_dec[:, i] @ S + attn[:, i] @ u
        S = S * end_decay[:, i] + k_dec[:, i].transpose(-1, -2) @ u
    o = out.view(H, n * chunk, -1)[:, :L].transpose(0, 1)
    return o, S


def recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token by token, batched over sequences: q, k [B, L, Hk, Dk], v [B, L, Hv, Dv], g, beta [B, L, Hv],
    state [B, Hv, Dk, Dv] float32 (not modified). Returns o [B, L, Hv, Dv] float32 and the new state.
    Decode runs it with L = 1; it is also the reference twin of ``chunk_gated_delta_rule``."""
    q, k, v, g, beta = _prepare(q, k, v, g, beta)  # [B, H, L, D], g/beta [B, H, L]
    S = state.float()
    out = torch.empty_like(v)
    for t in range(q.shape[2]):
        S = S * g[:, :, t].exp()[..., None, None]
        pred = (S * k[:, :, t, :, None]).sum(-2)  # S^T k  [B, H, Dv]
        delta = (v[:, :, t] - pred) * beta[:, :, t, None]
        S = S + k[:, :, t, :, None] * delta[:, :, None, :]
        out[:, :, t] = (S * q[:, :, t, :, None]).sum(-2)
    return out.transpose(1, 2), S


def gated_delta_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per sequence (decode): q, k [B, Hk, Dk], v [B, Hv, Dv], g, beta [B, Hv], state
    [B, Hv, Dk, Dv]. Returns o [B, Hv, Dv] float32 and the new state -- ``state`` itself, updated in
    place, when it is contiguous float32 (the caller's gathered copy), else a new one. The same rule as
    ``recurrent_gated_delta_rule`` with L = 1 (its twin in the tests) in four passes over the state
    (decay, S^T k, the rank-1 update, S^T q) and no state-sized temporaries; the state is what a
    decode step of a linear-attention layer reads most (2 MiB a layer at Hv 32, Dk = Dv = 128)."""
    q, k, v, g, beta = _prepare(q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None])
    B, H, Dk, Dv = state.shape
    ok = state.dtype == torch.float32 and state.is_contiguous()
    S = (state if ok else state.float().contiguous()).view(B * H, Dk, Dv)
    S.mul_(g.exp().reshape(B * H, 1, 1))
    kk = k.reshape(B * H, 1, Dk)
    delta = (v.reshape(B * H, 1, Dv) - torch.bmm(kk, S)) * beta.reshape(B * H, 1, 1)
    S.baddbmm_(kk.transpose(1, 2), delta)  # S += k delta^T
    out = torch.bmm(q.reshape(B * H, 1, Dk), S)
    return out.view(B, H, Dv), S.view(B, H, Dk, Dv)


def causal_conv(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv + SiLU over one sequence's new inputs. x [L, C], conv_state [C, Kc-1] (the
    previous Kc-1 inputs; zeros at the start), weight [C, Kc]. Returns y [L, C] in x's dtype and the
    inputs with the previous ones before them, [Kc-1+L, C] in x's dtype: the conv state after the first
    n new inputs is its rows n .. n+Kc-2, transposed. Each output is Kc products summed in fp32, then
    rounded to x's dtype, as a decode step's; in [L, C] rows, channels contiguous (torch's depthwise
    conv1d ran a small GEMM a channel for bf16 on the CPU: ~50k calls, 0.8 s of a 128-token prefill of
    six Qwen3.5-shaped layers)."""
    L, K1 = x.shape[0], weight.shape[1] - 1
    seq = torch.cat([conv_state.t().to(x.dtype), x])  # [Kc-1+L, C]
    # fp32 operands (mixed bf16 x fp32 ones take torch's slow loops): w [Kc, C], s [Kc-1+L, C]
    w, s = weight.t().float(), seq.float()
    y = s[:L] * w[0]
    for j in range(1, K1 + 1):
        y.addcmul_(s[j : j + L], w[j])
    return F.silu(y.to(x.dtype)), seq


def causal_conv_step(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One new input per sequence: x [B, C], conv_state [B, C, Kc-1], weight [C, Kc] -> (y [B, C],
    new conv state [B, C, Kc-1]). Equals ``causal_conv`` with L = 1 per sequence."""
    seq = torch.cat([conv_state.to(x.dtype), x[:, :, None]], dim=2)  # [B, C, Kc]
    y = (seq * weight.to(x.dtype)[None]).sum(-1)
    return F.silu(y), seq[:, :, 1:]
