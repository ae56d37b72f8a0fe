"""ft_core.Engine in bfloat16 against transformers in bfloat16, both measured against transformers in float32.

Decode steps (one token per sequence) run the projections through ft_kernels' CPU kernel (bf16 weights,
fp32 accumulation, one rounding to bf16 per product) and the routed experts through the expert kernel
with bf16 activations; prefill runs torch's bf16 GEMMs for the projections and the kernel or the GEMM for
the experts (``kernel_max_routes``). A bf16 forward rounds every activation to 8
significant bits (unit roundoff 2^-8), so neither side equals float32; the bound is that ft's error
against float32 stays within twice transformers' own bf16 error plus 2^-8 of max |logit| (one
rounding of the logits), at every step of a 12-token decode and for the full-prefix scores.

Positions where a near-tie in a router's top-k picks another expert in bf16 than in float32 (a discrete
change that no rounding bound covers) are excluded, detected from both engines' routing records; they
must stay a small minority.
"""

import copy
import json

import pytest
import torch
from tiny_checkpoints import ARCHS, HYBRID_ARCHS, load_reference

from ft_core import Engine, SamplingParams

IDS = [(i * 37 + 11) % 500 + 3 for i in range(40)]
STEPS = 12


@pytest.fixture(scope="module", params=ARCHS + HYBRID_ARCHS)
def models(request, tiny_ckpt, tmp_path_factory):
    path = tiny_ckpt(request.param, None)
    ref32 = load_reference(path)
    logs = tmp_path_factory.mktemp("routes")
    for name in ("16.jsonl", "32.jsonl"):
        (logs / name).touch()
    eng16 = Engine.from_pretrained(
        path, device="cpu", dtype="bfloat16", record_routing=str(logs / "16.jsonl")
    )
    eng32 = Engine.from_pretrained(
        path, device="cpu", dtype="float32", record_routing=str(logs / "32.jsonl")
    )
    return ref32, copy.deepcopy(ref32).to(torch.bfloat16), eng16, eng32


def _take_routes(eng) -> list[list[frozenset]]:
    """Per token of the forwards since the last call (in order): its expert set in every MoE layer."""
    path = eng.config.record_routing
    with open(path) as f:
        recs = [json.loads(line) for line in f]
    open(path, "w").close()
    return [
        [frozenset(layer[t]) for layer in r["layers"]]
        for r in recs
        for t in range(sum(r["seq_tokens"]))
    ]


def _bound_ok(got, ref16, ref32, flipped, what):
    keep = torch.tensor([not f for f in flipped])
    assert keep.float().mean() >= 0.75, (
        f"{what}: routing flipped at {sum(flipped)} of {len(flipped)} positions"
    )
    got, ref16, ref32 = got[keep], ref16[keep], ref32[keep]
    err_ft = (got - ref32).abs().max().item()
    err_hf = (ref16 - ref32).abs().max().item()
    bound = 2 * err_hf + 2**-8 * ref32.abs().max().item()
    assert err_ft <= bound, (
        f"{what}: ft bf16 error {err_ft:.3g} > {bound:.3g} (transformers bf16 error {err_hf:.3g})"
    )


def test_decode_steps_within_bf16_error(models):
    ref32, ref16, eng, eng32 = models
    _take_routes(eng)
    rows, forward = [], eng.runner.forward

    def spy(b, *a):
        out = forward(b, *a)
        rows.append(out[0].clone())
        return out

    eng.runner.forward = spy
    try:
        toks = eng.generate(
            IDS[:9], SamplingParams(max_tokens=STEPS, temperature=0.0, ignore_eos=True)
        )[0].token_ids
    finally:
        del eng.runner.forward
    r16 = _take_routes(eng)[8 : 8 + STEPS]  # the prompt's last token, then one per decode step
    eng32.score(IDS[:9] + toks[:-1])
    r32 = _take_routes(eng32)[8:]
    flipped = [a != b for a, b in zip(r16, r32)]
    want = {}
    with torch.no_grad():
        for name, ref in (("32", ref32), ("16", ref16)):
            out = ref(torch.tensor([IDS[:9]]), use_cache=True)
            w = [out.logits[0, -1]]
            for t in toks[:-1]:
                out = ref(torch.tensor([[t]]), cache=out.cache, use_cache=True)
                w.append(out.logits[0, -1])
            want[name] = torch.stack(w).float()
    got = torch.stack(rows).float()
    assert got.shape == want["32"].shape
    _bound_ok(got, want["16"], want["32"], flipped, "decode steps")  # rows 1.. are one-token steps


def test_score_within_bf16_error(models):
    ref32, ref16, eng, eng32 = models
    with torch.no_grad():
        w32, w16 = (
            ref32(torch.tensor([IDS])).logits[0].float(),
            ref16(torch.tensor([IDS])).logits[0].float(),
        )
    _take_routes(eng)
    _take_routes(eng32)
    got = eng.score(IDS)
    eng32.score(IDS)
    flipped = [a != b for a, b in zip(_take_routes(eng), _take_routes(eng32))]
    _bound_ok(got, w16, w32, flipped, "score")
