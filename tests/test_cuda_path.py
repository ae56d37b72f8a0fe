"""The expert tier on a CUDA device (device="cuda"): skipped without a GPU (marker ``cuda``; CI has
none), run by benchmarks/gpu_check.py on one. The same orchestration runs in CI on the CPU stand-in
(tests/test_expert_hierarchy.py, packages/ft-core/tests/device/)."""

import pytest
import torch
from bounds import assert_logits_close

from ft_core import Engine, SamplingParams

pytestmark = pytest.mark.cuda

IDS = [(i * 37 + 11) % 500 + 3 for i in range(40)]
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def test_cuda_streams_keep_their_order():
    from ft_core.device.cuda import CudaDevice

    dev = CudaDevice("cuda")
    src = torch.arange(1 << 20, dtype=torch.float32).pin_memory()
    dst = torch.zeros(1 << 20, device=dev.name)
    ev = dev.copy.run(lambda: dst.copy_(src, non_blocking=True))
    dev.compute.wait(ev)
    got = dev.compute.run(lambda: dst.sum())
    got.synchronize()
    assert got.result().item() == src.double().sum().item()
    free, total = dev.mem_get_info()
    assert 0 < free <= total


@pytest.mark.parametrize(
    "arch,variant", [("qwen3_moe", None), ("deepseek_v3", "fp8"), ("gpt_oss", "mxfp4")]
)
@pytest.mark.parametrize(
    "kw",
    [
        dict(moe_backend="fill", moe_cache_slots=1),
        dict(moe_backend="fill", moe_cache_fraction=0.5),
        dict(moe_backend="fill", moe_cache_fraction=1.0),
        dict(moe_backend="hybrid", moe_bandwidth_ratio=0.5, moe_cache_fraction=0.25),
        dict(moe_backend="static", moe_cache_fraction=0.25),
    ],
    ids=["fill-1slot", "fill-half", "fill-all", "hybrid-quarter", "static-quarter"],
)
def test_cuda_expert_tier_matches_the_cpu_engine(tiny_ckpt, arch, variant, kw):
    """Slot routes on the GPU (Triton grouped GEMM for bf16 slots, torch for the others), misses on
    the host: logits within the fp32 bound of the CPU engine's."""
    path = tiny_ckpt(arch, variant)
    want = Engine.from_pretrained(path, moe_backend="cpu").score(IDS)
    eng = Engine.from_pretrained(path, device="cuda", **kw)
    assert eng.model.backend.cache.store["w13"].is_cuda
    assert_logits_close(eng.score(IDS), want, eng.model_config)
    eng.generate(IDS[:9], GREEDY)
    eng.model.backend.cache.check()
    t = eng.expert_stats()["total"]
    assert t["device_routes"] > 0
