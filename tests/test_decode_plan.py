"""Decode plans (models/decode_plan.py: a decoder layer of a bf16 decode step as one ft_kernels.DecodeLayer
call) against the same engine running every layer op by op (decode_plans=False).

The plan runs the same kernels in the same order with the same roundings, so the logits of every decode step,
the sampled tokens and the routing record must be equal bit for bit -- for every architecture (those the plan
does not cover run op by op in both engines; a model may mix planned and op-by-op layers, as GPT-OSS's
windowed layers do), with bf16 and 4-bit dense weights (also with int8 activations), for three sequences of different lengths decoding
together. Which layers get a plan is checked too, so a change that silently stops planning them fails here.
"""

import json

import pytest
import torch
import tiny_checkpoints
from engine_spy import sampled_logits

from ft_core import Engine, SamplingParams

# Architectures whose decoder layers the plan covers (GQA over paged KV, or the Qwen3-Next family's gated
# attention and Gated DeltaNet layers with (1 + w) norms; routed experts, with or without a shared expert):
# every MoE layer, or (GPT-OSS) the full-attention ones -- its windowed layers keep their window as state.
ALL_PLANNED = {"qwen3_moe", "mixtral", "olmoe", "qwen2_moe", "qwen3_next", "qwen3_5_moe"}
SOME_PLANNED = {"gpt_oss"}
CASES = [(a, None) for a in tiny_checkpoints.ARCHS + tiny_checkpoints.HYBRID_ARCHS] + [
    ("qwen3_moe", "fp8"),
    ("gpt_oss", "mxfp4"),
]
PROMPTS = [[(i * 37 + 11 + 5 * s) % 500 + 3 for i in range(n)] for s, n in enumerate((9, 3, 14))]


def _run(path, tmp_path, name, plans, dense_format):
    log = tmp_path / f"{name}.jsonl"
    log.touch()
    fmt, int8 = (
        dense_format.split("+") if dense_format and "+" in dense_format else (dense_format, "")
    )
    eng = Engine.from_pretrained(
        path,
        device="cpu",
        dtype="bfloat16",
        decode_plans=plans,
        dense_format=fmt,
        int8_activations=int8 == "int8",
        record_routing=str(log),
    )
    rows = sampled_logits(eng)
    seqs = [
        eng.add_request(p, SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))
        for p in PROMPTS
    ]
    while not all(s.finished for s in seqs):
        eng.step()
    routes = [json.loads(line) for line in log.read_text().splitlines()]
    return eng, [s.output_ids for s in seqs], {k: torch.stack(v) for k, v in rows.items()}, routes


@pytest.mark.parametrize("dense_format", [None, "int4_sym", "int4_sym+int8"])
@pytest.mark.parametrize("arch, variant", CASES, ids=[f"{a}-{v}" if v else a for a, v in CASES])
def test_planned_decode_equals_op_by_op(tiny_ckpt, tmp_path, arch, variant, dense_format):
    path = tiny_ckpt(arch, variant)
    planned, toks_p, rows_p, routes_p = _run(path, tmp_path, "plans", True, dense_format)
    plain, toks_o, rows_o, routes_o = _run(path, tmp_path, "ops", False, dense_format)
    n_plans = sum(p is not None for p in planned.model.plans)
    assert all(p is None for p in plain.model.plans)
    if arch in ALL_PLANNED:
        assert n_plans == sum(planned.model_config.moe_layers) > 0
    elif arch in SOME_PLANNED:
        assert 0 < n_plans < len(planned.model.plans)
    else:
        assert n_plans == 0
    assert toks_p == toks_o
    assert rows_p.keys() == rows_o.keys()
    for k in rows_p:
        assert torch.equal(rows_p[k], rows_o[k]), (arch, k, (rows_p[k] - rows_o[k]).abs().max())
    assert routes_p == routes_o and len(routes_p) > 1


def test_planned_gated_deltanet_layers_take_decode_checkpoints(tiny_ckpt):
    """A Gated DeltaNet layer's plan advances the states in their pools and takes the checkpoints asked for
    after a decode token (every_n, 4 tokens): a continuation resumes at one inside the previous answer, and
    every logit, token and cached-token count equals the op-by-op engine's."""
    path = tiny_ckpt("qwen3_5_moe")
    kw = dict(dtype="bfloat16", checkpoint_policy="every_n", checkpoint_interval=4)
    kw.update(checkpoints_per_prompt=100)
    engines = [Engine.from_pretrained(path, decode_plans=p, **kw) for p in (True, False)]
    assert all(p is not None for p in engines[0].model.plans)
    long = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    out = []
    for eng in engines:
        rows = sampled_logits(eng)
        a = eng.generate([PROMPTS[0]], long)[0]
        nxt = PROMPTS[0] + a.token_ids[:7] + [7, 8, 9]
        s = eng.add_request(nxt, SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
        while not s.finished:
            eng.step()
        out.append(
            (
                a.token_ids,
                s.output_ids,
                s.cached_tokens,
                {k: torch.stack(v) for k, v in rows.items()},
            )
        )
    (a_p, b_p, c_p, r_p), (a_o, b_o, c_o, r_o) = out
    assert (
        a_p == a_o and b_p == b_o and c_p == c_o == (len(PROMPTS[0]) + 7) // 4 * 4 > len(PROMPTS[0])
    )
    assert r_p.keys() == r_o.keys() and all(torch.equal(r_p[k], r_o[k]) for k in r_p)


def test_fp8_experts_in_whole_blocks_take_the_rows_in_lanes_layout(tmp_path, monkeypatch):
    """An FP8 checkpoint in blocks and sizes the 16-row layout takes (block columns and sizes in 32s): a bfloat16
    engine on AMD's AVX-512 BF16 repacks its experts to fp8_e4m3_x16 (elsewhere they stay fp8_e4m3), with the same
    values as a float32 engine's bank, and its decode plans equal the op-by-op path bit for bit."""
    import ft_kernels

    monkeypatch.setattr(tiny_checkpoints, "FP8_BLOCK", (32, 32))
    sizes = dict(hidden_size=64, moe_intermediate_size=64, intermediate_size=64)
    path = tiny_checkpoints.make_checkpoint("qwen3_moe", tmp_path / "fp8", "fp8", overrides=sizes)
    stored = Engine.from_pretrained(path).model.bank  # float32: as stored
    assert stored.fmt == "fp8_e4m3" and stored.fp8_block == 32
    planned, toks_p, rows_p, _ = _run(path, tmp_path, "plans", True, None)
    plain, toks_o, rows_o, _ = _run(path, tmp_path, "ops", False, None)
    x16 = ft_kernels.bf16_simd("fp8_e4m3_x16")
    ids = torch.arange(stored.num_ids)
    for eng in (planned, plain):
        assert eng.model.bank.fmt == ("fp8_e4m3_x16" if x16 else "fp8_e4m3")
        for w in ("w13", "w2"):
            assert torch.equal(eng.model.bank.dequant(ids, w), stored.dequant(ids, w))
    assert toks_p == toks_o and rows_p.keys() == rows_o.keys()
    for k in rows_p:
        assert torch.equal(rows_p[k], rows_o[k]), (k, (rows_p[k] - rows_o[k]).abs().max())
