"""Python face of the decode-layer plan (csrc/cpu/decode_layer.h): one GQA attention + routed-experts decoder
layer of a bf16 decode step in one C++ call.

Built once per layer from its weights (the plan keeps them alive), called once per step. Twin: the same layer
op by op through this package's functions (``rms_norm``, ``linear``, ``rope``, ``decode_attention``,
``route_topk``, ``moe_experts``) with each fp32 output rounded to bf16 and the residual sums taken in bf16 --
what ft_core's layers do -- which it equals bit for bit (tests/test_decode_layer.py).

Legend: T = tokens (one per sequence), H = hidden, N = query heads, K = KV heads, D = head dim, E = experts.
"""

from __future__ import annotations

import torch

from ft_kernels import _C
from ft_kernels.cpu import ACTS, ROUTES, _a
from ft_kernels.formats import FORMATS, ExpertWeights

QK_NORMS = {"none": 0, "head": 1, "full": 2}


def _matrix(name: str, w: ExpertWeights | torch.Tensor) -> ExpertWeights:
    if isinstance(w, torch.Tensor):
        if w.dim() != 2 or w.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(
                f"{name} must be a [rows, cols] bfloat16 or float16 tensor, got {w.dtype} {list(w.shape)}"
            )
        w = ExpertWeights(
            "bf16" if w.dtype == torch.bfloat16 else "f16", w.contiguous()[None], w.shape[1]
        )
    if w.fmt not in FORMATS:
        raise ValueError(f"{name}.fmt {w.fmt!r} is not one of {', '.join(FORMATS)}")
    return w


def _bf16(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.to(torch.bfloat16).contiguous()


def _f32(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.float().contiguous()


class DecodeLayer:
    """x <- x + o(attn(rope(qk_norm(split(qkv(norm1(x))))))); x <- x + experts(norm2(x)) for T decode tokens.

    ``attn`` picks the attention half: "gqa" (above; ``parts`` instead of qkv: its q, k, v rows in matrices of
    their own formats, no bias), "gated" (the Qwen3-Next family's full attention: ``parts``
    give per head D query and D gate rows, then k, then v; q_norm / k_norm [D] float32 (1 + w) per head;
    o(attn * sigmoid(gate))) or "gdn" (a Gated DeltaNet layer: ``parts`` give the in-projection, ``gdn`` its own
    weights -- k_heads, v_heads, k_dim, v_dim, conv_w [C, Kc] bf16, neg_A, dt_bias [Hv] float32, norm_w [Dv]
    bf16, out_order [Hv Dv] int64 or None -- and o is the out-projection); ``shared`` adds a shared expert
    (gate_up: its gate then up rows in one or two matrices; down; gate [1, H] or None; int8: the int8 flags of
    (gate_up, down, gate)). float32 ln1 / ln2 are (1 + w) norms, rounded once.

    Weights: ln1, ln2 [H]; qkv [(N + 2K) D, H] (q rows, then k, then v) and o [H, N D] as ExpertWeights of one
    matrix in any kernel format or bf16/f16 tensors; router [E, H] likewise; biases [rows] (fp32 in the kernel);
    qk_norm "none", "head" (q_norm, k_norm [D]) or "full" ([N D], [K D]); sinks [N]; the routed experts as the
    bank's w13 [n, 2I, H] and w2 [n, H, I] with this layer's expert 0 at ``base``. ``*_int8``: opt-in int8
    activations for 4-bit and K-quant weights (see ``moe_experts``; other formats ignore it). Raises ValueError naming a bad argument."""

    def __init__(
        self,
        H: int,
        N: int,
        K: int,
        D: int,
        eps: float,
        ln1: torch.Tensor,
        ln2: torch.Tensor,
        qkv,
        o,
        router,
        w13: ExpertWeights,
        w2: ExpertWeights,
        *,
        top_k: int,
        attn_scale: float,
        qkv_bias=None,
        o_bias=None,
        router_bias=None,
        qk_norm: str = "none",
        q_norm=None,
        k_norm=None,
        rope_interleaved: bool = False,
        window: int = 0,
        sinks=None,
        route: str = "softmax",
        renorm: bool = False,
        base: int = 0,
        act: str = "swiglu",
        alpha: float = 1.702,
        limit: float = 7.0,
        qkv_int8: bool = False,
        o_int8: bool = False,
        experts_int8: bool = False,
        attn: str = "gqa",
        parts: list | None = None,
        parts_int8: bool = False,
        gdn: dict | None = None,
        shared: dict | None = None,
    ):
        for name, v, table in (
            ("qk_norm", qk_norm, QK_NORMS),
            ("route", route, ROUTES),
            ("act", act, ACTS),
        ):
            if v not in table:
                raise ValueError(f"{name} must be one of {', '.join(table)}, got {v!r}")
        if attn not in ("gqa", "gated", "gdn"):
            raise ValueError(f"attn must be one of gqa, gated, gdn, got {attn!r}")
        norm = _f32 if ln1.dtype == torch.float32 else _bf16
        p = self._plan = _C.DecodeLayerPlan(H, N, K, D, float(eps), _a(norm(ln1)), _a(norm(ln2)))
        dense = [("o", o, o_bias, o_int8), ("router", router, router_bias, False)]
        # GQA's q, k and v in their own formats: its rows as parts (no bias)
        if attn == "gqa" and parts:
            if qkv is not None or qkv_bias is not None:
                raise ValueError("gqa takes qkv (with qkv_bias) or parts, not both")
        elif attn == "gqa":
            dense.insert(0, ("qkv", qkv, qkv_bias, qkv_int8))
        sh8 = (shared or {}).get("int8", (False, False, False))  # gate_up, down, gate
        for which, w, i8 in [("attn", w, parts_int8) for w in (parts or [])] + [
            ("shared_gate_up", w, sh8[0]) for w in (shared or {}).get("gate_up", [])
        ]:
            m = _matrix(which, w)
            p.add_part(which, FORMATS[m.fmt], _a(m.q), _a(m.scale), _a(m.zero), m.group,
                       m.global_scale, m.cols, bool(i8))  # fmt: skip
        if shared is not None:
            dense += [("shared_down", shared["down"], None, sh8[1])]
            if shared.get("gate") is not None:
                dense += [("shared_gate", shared["gate"], None, sh8[2])]
            p.set_shared(int(shared["I"]), shared.get("gate") is not None)
        for which, w, b, i8 in dense:
            m = _matrix(which, w)
            p.set_dense(
                which,
                FORMATS[m.fmt],
                _a(m.q),
                _a(m.scale),
                _a(m.zero),
                m.group,
                m.global_scale,
                m.cols,
                _a(_f32(b)),
                bool(i8),
            )
        if attn == "gated":
            p.set_gated(
                _a(_f32(q_norm)), _a(_f32(k_norm)), bool(rope_interleaved), float(attn_scale)
            )
        elif attn == "gdn":
            g = gdn
            p.set_gdn(int(g["k_heads"]), int(g["v_heads"]), int(g["k_dim"]), int(g["v_dim"]),
                      _a(_bf16(g["conv_w"])), _a(_f32(g["neg_A"])), _a(_f32(g["dt_bias"])),
                      _a(_bf16(g["norm_w"])), _a(None if g.get("out_order") is None else g["out_order"].long().contiguous()))  # fmt: skip
        else:
            self._set_gqa(p, qk_norm, q_norm, k_norm, rope_interleaved, attn_scale, window, sinks)
        self._set_experts(p, w13, w2, top_k, route, renorm, base, act, alpha, limit, experts_int8)

    @staticmethod
    def _set_gqa(p, qk_norm, q_norm, k_norm, rope_interleaved, attn_scale, window, sinks):
        p.set_attention(
            QK_NORMS[qk_norm],
            _a(_bf16(q_norm)),
            _a(_bf16(k_norm)),
            bool(rope_interleaved),
            float(attn_scale),
            int(window),
            _a(_f32(sinks)),
        )

    @staticmethod
    def _set_experts(p, w13, w2, top_k, route, renorm, base, act, alpha, limit, experts_int8):
        for name, w in (("w13", w13), ("w2", w2)):
            if w.fmt not in FORMATS:
                raise ValueError(f"{name}.fmt {w.fmt!r} is not one of {', '.join(FORMATS)}")
        p.set_experts(
            int(top_k),
            ROUTES[route],
            bool(renorm),
            int(base),
            FORMATS[w13.fmt],
            _a(w13.q),
            _a(w13.scale),
            _a(w13.zero),
            w13.group,
            w13.global_scale,
            _a(w13.bias),
            FORMATS[w2.fmt],
            _a(w2.q),
            _a(w2.scale),
            _a(w2.zero),
            w2.group,
            w2.global_scale,
            _a(w2.bias),
            ACTS[act],
            float(alpha),
            float(limit),
            bool(experts_int8),
        )

    def __call__(
        self,
        x: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        page_table: torch.Tensor,
        ctx_lens: torch.Tensor,
        slots: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        eid_out: torch.Tensor | None = None,
        conv_state: torch.Tensor | None = None,
        state: torch.Tensor | None = None,
        state_slots: torch.Tensor | None = None,
    ) -> None:
        """x [T, H] bfloat16, updated in place; k_pool, v_pool [P, S, K, D] bfloat16 (each token's new key and value
        written at its flat row ``slots`` [T] int64 = page * S + offset); page_table [T, Pmax] and ctx_lens [T] int64
        as ``decode_attention`` takes them (the new token included); cos, sin [T, R/2] float32 (``rope``); eid_out
        [T, top_k] int32, if given, receives the routed experts (base + expert, as ``route_topk`` picks them).
        A "gdn" layer takes its state pools conv_state [Ns, C, Kc-1] bf16 and state [Ns, Hv, Dk, Dv] float32
        (advanced in place) and each token's slot in them, state_slots [T] int64; its KV arguments are unused."""
        self._plan.run(
            _a(x),
            _a(k_pool),
            _a(v_pool),
            _a(page_table),
            _a(ctx_lens),
            _a(slots),
            _a(cos),
            _a(sin),
            _a(eid_out),
            _a(conv_state),
            _a(state),
            _a(state_slots),
        )
