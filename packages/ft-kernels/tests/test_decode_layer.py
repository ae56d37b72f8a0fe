"""ft_kernels.DecodeLayer (one decoder layer of a bf16 decode step in one C++ call) against its twin: the same
layer op by op through this package's functions, with the roundings ft_core's layers apply between them. The
plan runs the same kernels in the same order on the same values, so the residual stream and both KV pools
must be equal bit for bit (a dropped rounding, a swapped q/k/v slice, a KV row written elsewhere or a wrong
expert base changes bits).

Cases: dense weights as bf16 tensors and as int4_sym / mxfp4 matrices; experts in bf16, mxfp4 and int4_sym;
QK norm none / per head / whole projection; biases, sinks and windows; softmax (renormalised or not) and
top-k-softmax routers; SwiGLU and the GPT-OSS activation; T = 1, 3 and 5 sequences with ragged contexts on
shuffled pages; a layer whose experts sit at a nonzero base of a shared bank. Bad arguments name themselves.
"""

import dataclasses

import ft_kernels as fk
import pytest
import torch

BF = torch.bfloat16
H, N, K, D, E, I = 64, 4, 2, 16, 8, 32  # noqa: E741
S = 8  # page size


def dense(w: torch.Tensor, fmt: str):
    """[rows, cols] float weights -> a bf16 tensor or a one-matrix ExpertWeights in fmt."""
    return w.to(BF) if fmt == "bf16" else fk.quantize(w[None].float(), fmt, group=32)


def make_layer(seed, dense_fmt, expert_fmt, qk_norm, extras, route, act, base_layers=1):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, sc=1.0: torch.randn(*s, generator=g) * sc  # noqa: E731
    n_exp = E * (base_layers + 1)
    w13f, w2f = r(n_exp, 2 * I, H, sc=H**-0.5), r(n_exp, H, I, sc=I**-0.5)
    if expert_fmt == "bf16":
        w13 = fk.ExpertWeights("bf16", w13f.to(BF), H)
        w2 = fk.ExpertWeights("bf16", w2f.to(BF), I)
    else:
        w13, w2 = fk.quantize(w13f, expert_fmt, group=32), fk.quantize(w2f, expert_fmt, group=32)
    if act == "gptoss":
        w13 = dataclasses.replace(w13, bias=r(n_exp, 2 * I, sc=0.1))
        w2 = dataclasses.replace(w2, bias=r(n_exp, H, sc=0.1))
    qn = {"none": None, "head": (D, D), "full": (N * D, K * D)}[qk_norm]
    p = dict(
        H=H,
        N=N,
        K=K,
        D=D,
        eps=1e-6,
        ln1=(1 + r(H, sc=0.1)).to(BF),
        ln2=(1 + r(H, sc=0.1)).to(BF),
        qkv=dense(r((N + 2 * K) * D, H, sc=H**-0.5), dense_fmt),
        o=dense(r(H, N * D, sc=(N * D) ** -0.5), dense_fmt),
        router=r(E, H, sc=H**-0.5).to(BF),
        w13=w13,
        w2=w2,
        top_k=2,
        attn_scale=D**-0.5,
        qk_norm=qk_norm,
        q_norm=None if qn is None else (1 + r(qn[0], sc=0.1)).to(BF),
        k_norm=None if qn is None else (1 + r(qn[1], sc=0.1)).to(BF),
        route=route,
        renorm=route == "softmax" and seed % 2 == 0,
        base=E * base_layers,
        act=act,
        rope_interleaved=seed % 3 == 0,
    )
    if extras:
        p.update(
            qkv_bias=r((N + 2 * K) * D, sc=0.1).to(BF).float(),
            o_bias=r(H, sc=0.1).to(BF).float(),
            router_bias=r(E, sc=0.1).to(BF).float(),
            sinks=r(N),
            window=5,
        )
    return p


def make_step(seed, T, ctx):
    g = torch.Generator().manual_seed(seed + 100)
    need = [-(-c // S) for c in ctx]
    pmax, P = max(need), sum(need) + 2
    k_pool, v_pool = (
        torch.randn(P, S, K, D, generator=g).to(BF),
        torch.randn(P, S, K, D, generator=g).to(BF),
    )
    order = torch.randperm(P, generator=g)
    table = torch.zeros(T, pmax, dtype=torch.int64)
    used = 0
    for b, n in enumerate(need):
        table[b, :n] = order[used : used + n]
        table[b, n:] = order[-1]
        used += n
    ctx_t = torch.tensor(ctx, dtype=torch.int64)
    slots = torch.tensor(
        [table[b, (c - 1) // S].item() * S + (c - 1) % S for b, c in enumerate(ctx)]
    )
    pos = (ctx_t - 1).float()[:, None] * torch.tensor([1.0, 0.3, 0.05, 0.01, 0.002, 0.0004])[
        None
    ]  # R = 12 of D = 16
    x = (torch.randn(T, H, generator=g) * 2).to(BF)
    return x, k_pool, v_pool, table, ctx_t, slots, pos.cos(), pos.sin()


def op_by_op(p, x, k_pool, v_pool, table, ctx_t, slots, cos, sin):
    """The twin: the layer through ft_kernels' single ops, rounded between them as ft_core's bf16 layers are."""
    T, eps = x.shape[0], p["eps"]
    lin = lambda a, w, b=None: fk.linear(a, w if isinstance(w, fk.ExpertWeights) else w, b).to(BF)  # noqa: E731
    qkv = lin(fk.rms_norm(x, p["ln1"], eps), p["qkv"], p.get("qkv_bias"))
    q, k, v = qkv.split((N * D, K * D, K * D), dim=-1)
    if p["qk_norm"] == "full":
        q, k = (
            fk.rms_norm(q.contiguous(), p["q_norm"], eps),
            fk.rms_norm(k.contiguous(), p["k_norm"], eps),
        )
    q, k, v = q.reshape(T, N, D), k.reshape(T, K, D), v.reshape(T, K, D)
    if p["qk_norm"] == "head":
        q, k = (
            fk.rms_norm(q.contiguous(), p["q_norm"], eps),
            fk.rms_norm(k.contiguous(), p["k_norm"], eps),
        )
    q, k = (
        fk.rope(q.contiguous(), cos, sin, p["rope_interleaved"]),
        fk.rope(k.contiguous(), cos, sin, p["rope_interleaved"]),
    )
    k_pool.view(-1, K, D).index_copy_(0, slots, k)
    v_pool.view(-1, K, D).index_copy_(0, slots, v)
    o = fk.decode_attention(
        q, k_pool, v_pool, table, ctx_t, p["attn_scale"], p.get("window", 0), p.get("sinks")
    ).to(BF)
    x = x + lin(o.reshape(T, -1), p["o"], p.get("o_bias"))
    h = fk.rms_norm(x, p["ln2"], eps)
    logits = lin(h, p["router"], p.get("router_bias")).float()
    tok, eid, gate = fk.route_topk(logits, p["top_k"], p["route"], p["renorm"], p["base"])
    return x + fk.moe_experts(h, tok, eid, gate, p["w13"], p["w2"], act=p["act"]).to(BF), eid.view(
        T, -1
    )


CASES = [  # dense fmt, expert fmt, qk_norm, extras (biases, sinks, window), route, act
    ("bf16", "bf16", "head", False, "softmax", "swiglu"),
    ("bf16", "mxfp4", "full", True, "softmax", "swiglu"),
    ("int4_sym", "int4_sym", "head", False, "softmax", "swiglu"),
    ("mxfp4", "mxfp4", "none", True, "topk_softmax", "gptoss"),
    ("bf16", "int4_sym", "none", False, "topk_softmax", "swiglu"),
]


@pytest.mark.parametrize("T, ctx", [(1, [9]), (3, [1, 17, 40]), (5, [8, 9, 2, 33, 16])])
@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_decode_layer_equals_op_by_op(case, T, ctx):
    seed = hash(case) % 1000 + T
    p = make_layer(seed, *case)
    x, kp, vp, table, ctx_t, slots, cos, sin = make_step(seed, T, ctx)
    kp_want, vp_want = kp.clone(), vp.clone()
    want, eid_want = op_by_op(p, x.clone(), kp_want, vp_want, table, ctx_t, slots, cos, sin)
    layer = fk.DecodeLayer(**p)
    got, eid = x.clone(), torch.full((T, p["top_k"]), -1, dtype=torch.int32)
    layer(got, kp, vp, table, ctx_t, slots, cos, sin, eid_out=eid)
    assert torch.equal(got, want), (got.float() - want.float()).abs().max()
    assert torch.equal(kp, kp_want) and torch.equal(vp, vp_want)
    assert torch.equal(eid, eid_want)
    assert not torch.equal(got, x)  # the layer did something


def test_bad_arguments_name_themselves():
    p = make_layer(1, "bf16", "bf16", "head", False, "softmax", "swiglu")
    x, kp, vp, table, ctx_t, slots, cos, sin = make_step(1, 1, [9])
    layer = fk.DecodeLayer(**p)
    with pytest.raises(ValueError, match="x must be bfloat16"):
        layer(x.float(), kp, vp, table, ctx_t, slots, cos, sin)
    with pytest.raises(ValueError, match="v_pool must be bfloat16"):
        layer(x, kp, vp[:, :, :1].contiguous(), table, ctx_t, slots, cos, sin)
    with pytest.raises(ValueError, match="slots must be int64"):
        layer(x, kp, vp, table, ctx_t, slots.int(), cos, sin)
    with pytest.raises(ValueError, match=r"eid_out must be int32 \[T, top_k=2\]"):
        layer(
            x, kp, vp, table, ctx_t, slots, cos, sin, eid_out=torch.zeros(1, 3, dtype=torch.int32)
        )
    with pytest.raises(ValueError, match="outside the pools"):
        layer(x, kp, vp, table, ctx_t, slots + 10_000, cos, sin)
    with pytest.raises(ValueError, match="qk_norm must be one of"):
        fk.DecodeLayer(**{**p, "qk_norm": "rms"})
    with pytest.raises(ValueError, match="q_norm must be bfloat16"):
        fk.DecodeLayer(**{**p, "q_norm": p["q_norm"][:3]})
    with pytest.raises(ValueError, match=r"qkv must be \[128, 64\], got \[128, 32\]"):
        fk.DecodeLayer(**{**p, "qkv": p["qkv"][:, :32]})
    with pytest.raises(ValueError, match=r"o must be \[64, 64\], got \[32, 64\]"):
        fk.DecodeLayer(**{**p, "o": p["o"][:32]})
