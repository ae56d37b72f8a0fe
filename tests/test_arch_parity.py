"""ft_core.Engine against transformers (float32) on tiny random checkpoints of every architecture.

For each (architecture, stored format): full-prefix logits of one forward, the logits of every step
of a step-by-step decode (transformers with its cache, one token per call), greedy generation of 32
tokens, and batched decode of 3 prompts of different lengths against each decoded alone. Hybrids
(Gated DeltaNet) run the recurrent form in decode on both sides; in prefill transformers runs its chunked
form and ft on the CPU its token-by-token kernel (ft_kernels.gdn_prefill).
"""

import pytest
import torch
from tiny_checkpoints import VARIANTS, load_reference, reference_greedy

from ft_core import Engine, SamplingParams
from bounds import assert_logits_close

IDS = [
    (i * 37 + 11) % 500 + 3 for i in range(48)
]  # longer than every sliding window in the tiny configs
PROMPTS = [IDS[:5], IDS[10:23], IDS[30:39]]
GREEDY = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)


def _id(v):
    return v[0] if v[1] is None else f"{v[0]}-{v[1]}"


@pytest.fixture(scope="module", params=VARIANTS, ids=[_id(v) for v in VARIANTS])
def pair(request, tiny_ckpt):
    path = tiny_ckpt(*request.param)
    return load_reference(path), Engine.from_pretrained(path, device="cpu", dtype="float32")


def test_score_matches_transformers(pair):
    ref, eng = pair
    with torch.no_grad():
        want = ref(torch.tensor([IDS])).logits[0].float()
    got = eng.score(IDS)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert_logits_close(got, want, eng.model_config)


def test_decode_step_logits_match_transformers(pair):
    """Prefill PROMPTS[2], then 16 decode steps: the logits the engine samples from at every step equal
    transformers' stepping one token at a time through its own cache (KV and recurrent state)."""
    ref, eng = pair
    rows, forward = [], eng.runner.forward

    def spy(b, *a):
        out = forward(b, *a)
        rows.append(out[0].clone())
        return out

    eng.runner.forward = spy
    try:
        toks = eng.generate(
            PROMPTS[2], SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
        )[0].token_ids
    finally:
        del eng.runner.forward
    want = []
    with torch.no_grad():
        out = ref(torch.tensor([PROMPTS[2]]), use_cache=True)
        want.append(out.logits[0, -1])
        for t in toks[:-1]:
            out = ref(torch.tensor([[t]]), cache=out.cache, use_cache=True)
            want.append(out.logits[0, -1])
    want, got = torch.stack(want).float(), torch.stack(rows)
    assert_logits_close(got, want, eng.model_config, len(PROMPTS[2]) + len(rows))


def test_greedy_generation_matches_transformers(pair):
    ref, eng = pair
    want = reference_greedy(ref, PROMPTS[1], 32)
    got = eng.generate(PROMPTS[1], GREEDY)[0].token_ids
    assert got == want


def test_batched_decode_equals_alone(pair):
    _, eng = pair
    together = [o.token_ids for o in eng.generate(PROMPTS, GREEDY)]
    alone = [eng.generate(p, GREEDY)[0].token_ids for p in PROMPTS]
    assert together == alone


@pytest.mark.parametrize(
    "variant",
    [("qwen3_moe", "fp8"), ("deepseek_v3", "fp8"), ("gpt_oss", None), ("gpt_oss", "mxfp4")],
    ids=_id,
)
def test_cpu_kernels_and_torch_reference_experts_agree(tiny_ckpt, variant):
    """The C++ kernels (in-kernel dequantisation, GPT-OSS activation with biases) against the torch backend."""
    path = tiny_ckpt(*variant)
    k = Engine.from_pretrained(path, expert_impl="kernel")
    t = Engine.from_pretrained(path, expert_impl="torch")
    assert k.model.backend.name == "kernel" and t.model.backend.name == "torch"
    a, b = k.score(IDS), t.score(IDS)
    assert_logits_close(a, b, t.model_config)
