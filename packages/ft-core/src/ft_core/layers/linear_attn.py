"""Gated DeltaNet layer (Qwen3-Next / Qwen3.5 linear attention) over a packed batch.

in-projection -> (qkv, z, b, a); short causal conv + SiLU on qkv; gated delta rule with
beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias); gated RMSNorm with z; out-projection.
Each sequence's conv and recurrent state live in a slot of ``batch.state.live``: decode tokens of all
sequences run together in the recurrent form, prompt chunks one sequence at a time (in the chunked
form, or on the CPU with torch's rule token by token in ``ft_kernels.gdn_prefill``), split at the
requested snapshot points (``batch.state.snaps``) so the state after exactly those tokens is copied
into checkpoint slots. Qwen3-Next stores the projections grouped per key head
(``in_proj_qkvz``, ``in_proj_ba``); they are reordered at load into the flat Qwen3.5 order. The delta
rule runs in torch (gated_delta.py) or in flash-linear-attention's kernels (gated_delta_fla.py), picked
once at construction (``impl``: EngineConfig.resolved_linear_attn_impl). A forward of decode tokens only on
the CPU (torch's rule) runs everything between the two projections in one ``ft_kernels.gdn_decode`` call
on the pooled states in place (its twin: the torch path below, within float rounding).

Legend: T = packed tokens, H = hidden, C = conv channels (q, k, v), Hk/Hv = key/value heads,
Dk/Dv = key/value dims, Kc = conv kernel, r = Hv / Hk.
"""

from __future__ import annotations

import ft_kernels
import torch
import torch.nn.functional as F

from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.layers import gated_delta, gated_delta_fla
from ft_core.layers.batch import ForwardBatch
from ft_core.layers.dense import linear
from ft_core.layers.gated_delta import causal_conv, causal_conv_step
from ft_core.layers.norm_offset import gated_rms_norm
from ft_core.model_config import ModelConfig


def _ungroup(w: torch.Tensor, hk: int, parts: list[int]) -> list[torch.Tensor]:
    """Rows grouped per key head [hk * sum(parts), H] -> one [hk * part, H] block per part (flat order)."""
    g = w.view(hk, sum(parts), -1).split(parts, dim=1)
    return [x.reshape(hk * p, -1) for x, p in zip(g, parts)]


class GatedDeltaNet:
    def __init__(
        self, r, cfg: ModelConfig, layer: int, prefix: str, index: int, impl: str = "torch"
    ):
        lin, H = cfg.linear, cfg.hidden_size
        self.cfg, self.layer, self.index = (
            cfg,
            layer,
            index,
        )  # index: among state layers (state pools)
        rule = (
            gated_delta_fla if impl == "fla" else gated_delta
        )  # EngineConfig.resolved_linear_attn_impl
        self.chunk_rule, self.recurrent_rule = (
            rule.chunk_gated_delta_rule,
            rule.recurrent_gated_delta_rule,
        )
        hk, hv, dk, dv = lin.k_heads, lin.v_heads, lin.k_dim, lin.v_dim
        rv = hv // hk * dv
        if lin.grouped_proj:
            q, k, v, z = _ungroup(
                r.linear(f"{prefix}.in_proj_qkvz", hk * (2 * dk + 2 * rv), H)[0],
                hk,
                [dk, dk, rv, rv],
            )
            b, a = _ungroup(
                r.linear(f"{prefix}.in_proj_ba", 2 * hv, H)[0], hk, [hv // hk, hv // hk]
            )
            w_in = [q, k, v, z, b, a]
        else:
            w_in = [
                r.linear(f"{prefix}.in_proj_qkv", lin.conv_dim, H)[0],
                r.linear(f"{prefix}.in_proj_z", hv * dv, H)[0],
                r.linear(f"{prefix}.in_proj_b", hv, H)[0],
                r.linear(f"{prefix}.in_proj_a", hv, H)[0],
            ]
        # one GEMM: [C + Hv*Dv + 2*Hv, H] (or its parts in stored formats: models/dense_quant.py)
        self.w_in = torch.cat(w_in)
        self.split = (lin.conv_dim, hv * dv, hv, hv)
        self.qkv_split = (hk * dk, hk * dk, hv * dv)
        self.conv_w = r.tensor(f"{prefix}.conv1d.weight", (lin.conv_dim, 1, lin.conv_kernel))[
            :, 0
        ]  # [C, Kc]
        self.neg_A = -r.tensor(f"{prefix}.A_log", (hv,), torch.float32).exp()
        self.dt_bias = r.tensor(f"{prefix}.dt_bias", (hv,), torch.float32)
        self.norm = r.tensor(f"{prefix}.norm.weight", (dv,))
        self.w_out, _ = r.linear(f"{prefix}.out_proj", H, hv * dv)
        self.out_order = (
            None  # [Hv*Dv] input order of a stored w_out with moved columns (keep_native)
        )

    def kv_layout(self, num_pages: int, page_size: int, dtype: torch.dtype) -> KVLayout:
        """No KV cache: a zero-width layout keeps KV layer indices equal to model layer indices."""
        return KVLayout(num_pages, page_size, 0, 0, 0, dtype)

    def _heads(self, y: torch.Tensor):
        """conv output [.., C] -> q [.., Hk, Dk], k [.., Hk, Dk], v [.., Hv, Dv]."""
        lin = self.cfg.linear
        q, k, v = y.split(self.qkv_split, dim=-1)
        return (
            q.unflatten(-1, (lin.k_heads, lin.k_dim)),
            k.unflatten(-1, (lin.k_heads, lin.k_dim)),
            v.unflatten(-1, (lin.v_heads, lin.v_dim)),
        )

    def __call__(
        self, x: torch.Tensor, batch: ForwardBatch, kv: PagedKVCache, cos_sin
    ) -> torch.Tensor:
        """x [T, H] -> [T, H]. Advances every sequence's live state (and fills requested checkpoints)."""
        st, j, lin = batch.state, self.index, self.cfg.linear
        T = x.shape[0]
        if isinstance(self.w_in, list):  # a GGUF's stored bits, one matrix per part (keep_native)
            proj = torch.cat([linear(x, w) for w in self.w_in], dim=-1)
        else:
            proj = linear(x, self.w_in)
        if batch.memo.get("captured"):  # a decode step captured in a graph (decode_graph.py)
            core = self._step(*self._gates(proj), batch.state_slots_tensor(), st.live.layer(j))
            return self._out(core, proj, x.dtype)
        if self._fused_decode(proj, batch, st):
            y = ft_kernels.gdn_decode(
                proj, self.conv_w, *st.live.layer(j), batch.state_slots_tensor(), self.neg_A,
                self.dt_bias, self.norm, self.cfg.rms_eps, lin.k_heads,
            )  # fmt: skip
            st.snapshot_decoded(j)
            return linear(y if self.out_order is None else y[:, self.out_order], self.w_out)
        mixed, g, beta = self._gates(proj)
        core = torch.empty(T, lin.v_heads, lin.v_dim, device=x.device)
        starts = [0]
        for n in batch.q_lens:
            starts.append(starts[-1] + n)
        snaps = st.snaps or [[] for _ in batch.q_lens]
        single = [i for i, n in enumerate(batch.q_lens) if n == 1]
        if single:  # decode tokens (and one-token chunks) of all sequences together, recurrent form
            rows = torch.tensor([starts[i] for i in single], device=x.device)
            slots = torch.tensor([st.slots[i] for i in single], device=x.device)
            one = st.slots[single[0]] if len(single) == 1 else None
            core[rows] = self._step(mixed[rows], g[rows], beta[rows], slots, st.live.layer(j), one)
            st.snapshot_decoded(j, single)
        for i, n in enumerate(batch.q_lens):
            if n > 1:
                s0 = starts[i]
                core[s0 : s0 + n] = self._prefill(
                    mixed[s0 : s0 + n], g[s0 : s0 + n], beta[s0 : s0 + n], st, i, snaps[i]
                )
        return self._out(core, proj, x.dtype)

    def _gates(self, proj: torch.Tensor):
        """The in-projection [T, ..] -> (mixed [T, C], g [T, Hv] float32, beta [T, Hv])."""
        mixed, _, b, a = proj.split(self.split, dim=-1)
        return mixed, self.neg_A * F.softplus(a.float() + self.dt_bias), b.sigmoid()

    def _out(self, core: torch.Tensor, proj: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The core output [T, Hv, Dv] -> gated RMSNorm with z -> out-projection [T, H] in ``dtype``."""
        lin, T = self.cfg.linear, core.shape[0]
        z = proj.split(self.split, dim=-1)[1]
        y = gated_rms_norm(
            core.to(dtype), z.view(T, lin.v_heads, lin.v_dim), self.norm, self.cfg.rms_eps
        )
        y = y.reshape(T, -1)
        return linear(y if self.out_order is None else y[:, self.out_order], self.w_out)

    def _step(self, mixed, g, beta, slots, live, one: int | None = None) -> torch.Tensor:
        """The recurrent form over decode rows (one token each): conv and delta rule from the live states at
        ``slots`` [n] (on the device), the new states written back there; ``one``: the slot of a lone
        sequence, whose state torch's rule updates in the pool itself (a view: no gather and scatter back).
        Returns the core output [n, Hv, Dv] float32."""
        live_conv, live_rec = live
        y, conv = causal_conv_step(mixed, live_conv[slots], self.conv_w)
        if self.recurrent_rule is gated_delta.recurrent_gated_delta_rule:  # torch: in place
            q, k, v = self._heads(y)
            rec = live_rec[one : one + 1] if one is not None else live_rec[slots]
            o, S = gated_delta.gated_delta_step(q, k, v, g, beta, rec)
            if one is not None and S.data_ptr() == rec.data_ptr():
                S = None  # already in place
        else:
            q, k, v = self._heads(y[:, None])
            o, S = self.recurrent_rule(q, k, v, g[:, None], beta[:, None], live_rec[slots])
            o = o[:, 0]
        live_conv[slots] = conv
        if S is not None:
            live_rec[slots] = S
        return o

    def _fused_decode(self, proj: torch.Tensor, batch: ForwardBatch, st) -> bool:
        """Whether this forward is decode tokens only (one per sequence) that ``ft_kernels.gdn_decode`` can run
        in one call: torch's rule (not flash-linear-attention's), on the CPU, float32 or bfloat16 throughout."""
        live_conv, live_rec = st.live.layer(self.index)
        dt = proj.dtype
        return (
            self.recurrent_rule is gated_delta.recurrent_gated_delta_rule
            and all(n == 1 for n in batch.q_lens)
            and proj.device.type == "cpu"
            and dt in (torch.float32, torch.bfloat16)
            and self.conv_w.dtype == self.norm.dtype == live_conv.dtype == dt
            and live_rec.dtype == torch.float32
            and self.conv_w.is_contiguous()
        )

    def _prefill(self, mixed, g, beta, st, i: int, snaps: list[tuple[int, int]]) -> torch.Tensor:
        """One sequence's chunk [L, ..] from its live state; returns the core output [L, Hv, Dv] float32. On the CPU
        with torch's rule, ``ft_kernels.gdn_prefill`` runs the rule token by token on the live state in place (twin:
        the recurrent rule, which the chunked one equals within float rounding); elsewhere the chunked rule."""
        j, slot, L, lin = self.index, st.slots[i], mixed.shape[0], self.cfg.linear
        live_conv, live_rec = st.live.layer(j)
        y, conv_in = causal_conv(mixed, live_conv[slot], self.conv_w)  # conv_in [Kc-1+L, C]
        S, out, done = live_rec[slot], [], 0
        kernel = (
            self.chunk_rule is gated_delta.chunk_gated_delta_rule
            and y.device.type == "cpu"
            and y.dtype in (torch.float32, torch.bfloat16)
            and S.dtype == torch.float32
            and S.is_contiguous()
        )
        if kernel:
            core, g, beta = (
                torch.empty(L, lin.v_heads, lin.v_dim),
                g.contiguous(),
                beta.float().contiguous(),
            )
        else:
            q, k, v = self._heads(y)
        width = live_conv.shape[-1]  # Kc-1
        for n, cslot in sorted(snaps) + [(L, -1)]:
            if n > done:
                if kernel:  # S advances in place
                    ft_kernels.gdn_prefill(
                        y[done:n], g[done:n], beta[done:n], S, lin.k_heads, out=core[done:n]
                    )
                else:
                    o, S = self.chunk_rule(
                        q[done:n], k[done:n], v[done:n], g[done:n], beta[done:n], S
                    )
                    out.append(o)
                done = n
            if cslot >= 0:  # the state after the first n tokens of this chunk
                ck_conv, ck_rec = st.ckpt.layer(j)
                ck_conv[cslot].copy_(conv_in[n : n + width].t())
                ck_rec[cslot].copy_(S)
        live_conv[slot] = conv_in[L:].t()
        if kernel:
            return core
        live_rec[slot] = S
        return torch.cat(out)
