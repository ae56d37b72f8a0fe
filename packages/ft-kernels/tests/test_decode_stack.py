"""ft_kernels.DecodeStack (a run of decode-layer plans in one C++ call) against its twin: the same DecodeLayer
objects called one after another, each on its own pools. Same kernels on the same values, so the residual
stream, every layer's KV pools and the routing record must be equal bit for bit (a layer run on another's
pools, skipped, run twice, or its experts recorded in another layer's row changes bits). Rebinding after the
pools are rebuilt writes to the new pools only. Bad arguments name themselves. The Gated DeltaNet layers in
a stack (their state pools bound instead of KV) are checked end to end in tests/test_decode_plan.py.
"""

import ft_kernels as fk
import pytest
import torch
from test_decode_layer import CASES, make_layer, make_step


def _stack_and_twins(T, ctx, n=3):
    """n different layers (CASES in turn), each with its own pools; the step's shared tensors."""
    layers, pools = [], []
    for i in range(n):
        p = make_layer(10 + i, *CASES[i % len(CASES)])
        layers.append(fk.DecodeLayer(**p))
        x, kp, vp, table, ctx_t, slots, cos, sin = make_step(20 + i, T, ctx)
        pools.append((kp, vp))
    return layers, pools, (x, table, ctx_t, slots, cos, sin)


@pytest.mark.parametrize("T, ctx", [(1, [9]), (3, [1, 17, 40])])
def test_stack_equals_its_layers_in_turn(T, ctx):
    layers, pools, (x, table, ctx_t, slots, cos, sin) = _stack_and_twins(T, ctx)
    want, want_pools, want_eid = x.clone(), [(k.clone(), v.clone()) for k, v in pools], []
    for layer, (kp, vp) in zip(layers, want_pools):
        eid = torch.full((T, 2), -1, dtype=torch.int32)
        layer(want, kp, vp, table, ctx_t, slots, cos, sin, eid_out=eid)
        want_eid.append(eid)
    stack = fk.DecodeStack(layers)
    none = [None] * len(layers)
    stack.bind([k for k, _ in pools], [v for _, v in pools], none, none)
    got, eid = x.clone(), torch.full((len(layers), T, 2), -1, dtype=torch.int32)
    stack(got, table, ctx_t, slots, cos, sin, eid_out=eid)
    assert torch.equal(got, want), (got.float() - want.float()).abs().max()
    for (k, v), (kw, vw) in zip(pools, want_pools):
        assert torch.equal(k, kw) and torch.equal(v, vw)
    assert torch.equal(eid, torch.stack(want_eid))
    assert not torch.equal(got, x)


def test_rebinding_moves_the_writes_to_the_new_pools():
    layers, pools, (x, table, ctx_t, slots, cos, sin) = _stack_and_twins(1, [9], n=2)
    stack = fk.DecodeStack(layers)
    ks, vs, none = [k for k, _ in pools], [v for _, v in pools], [None, None]
    stack.bind(ks, vs, none, none)
    assert stack.bound_to(ks, vs, none, none)
    new_ks, new_vs = [k.clone() for k in ks], [v.clone() for v in vs]
    assert not stack.bound_to(new_ks, new_vs, none, none)  # equal values, other tensors
    stack.bind(new_ks, new_vs, none, none)
    old = [(k.clone(), v.clone()) for k, v in pools]
    a = x.clone()
    stack(a, table, ctx_t, slots, cos, sin)
    assert all(torch.equal(k, ko) and torch.equal(v, vo) for (k, v), (ko, vo) in zip(pools, old))
    assert not all(torch.equal(k, ko) for k, (ko, _) in zip(new_ks, old))
    b = x.clone()
    stack.bind(ks, vs, none, none)
    stack(b, table, ctx_t, slots, cos, sin)
    assert torch.equal(a, b)  # the same step on pools holding the same values


def test_bad_arguments_name_themselves():
    layers, pools, (x, table, ctx_t, slots, cos, sin) = _stack_and_twins(1, [9], n=2)
    ks, vs, none = [k for k, _ in pools], [v for _, v in pools], [None, None]
    with pytest.raises(ValueError, match="non-empty list of DecodeLayer"):
        fk.DecodeStack([])
    stack = fk.DecodeStack(layers)
    with pytest.raises(ValueError, match="not bound: bind first"):
        stack(x, table, ctx_t, slots, cos, sin)
    with pytest.raises(ValueError, match=r"one entry per layer \(2\)"):
        stack.bind(ks[:1], vs, none, none)
    with pytest.raises(ValueError, match="layer 1 of the stack needs k_pool and v_pool"):
        stack.bind(ks, [vs[0], None], none, none)
    with pytest.raises(ValueError, match="v_pool must be bfloat16"):
        stack.bind(ks, [vs[0], vs[1].float()], none, none)
    assert not stack.bound_to(ks, vs, none, none)  # a refused bind binds nothing
    stack.bind(ks, vs, none, none)
    with pytest.raises(ValueError, match="x must be bfloat16"):
        stack(x.float(), table, ctx_t, slots, cos, sin)
    with pytest.raises(ValueError, match=r"eid_out must be int32 \[layers=2, T, top_k\]"):
        stack(x, table, ctx_t, slots, cos, sin, eid_out=torch.zeros(1, 1, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="outside the pools"):
        stack(x, table, ctx_t, slots + 10_000, cos, sin)
    wide = make_layer(1, *CASES[0])
    wide.update(H=128, ln1=torch.ones(128, dtype=torch.bfloat16), ln2=wide["ln1"].new_ones(128))
    wide.update(qkv=torch.zeros(128, 128, dtype=torch.bfloat16))
    wide.update(
        o=torch.zeros(128, 64, dtype=torch.bfloat16), router=wide["router"].new_zeros(8, 128)
    )
    wide.update(w13=fk.ExpertWeights("bf16", torch.zeros(16, 64, 128, dtype=torch.bfloat16), 128))
    wide.update(w2=fk.ExpertWeights("bf16", torch.zeros(16, 128, 32, dtype=torch.bfloat16), 32))
    with pytest.raises(ValueError, match="must share H"):
        fk.DecodeStack([layers[0], fk.DecodeLayer(**wide)])
