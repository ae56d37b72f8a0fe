"""The expert tier on a CUDA device (device="cuda"): skipped without a GPU (marker ``cuda``; CI has
none), run by benchmarks/gpu_check.py on one. The same orchestration runs in CI on the CPU stand-in
(tests/test_expert_hierarchy.py, packages/ft-core/tests/device/)."""

import pytest
import torch
from bounds import assert_logits_close
from engine_spy import sampled_logits

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


ARCHS = [("qwen3_moe", None), ("deepseek_v3", "fp8"), ("gpt_oss", "mxfp4"), ("qwen3_5_moe", None)]


@pytest.mark.parametrize("arch,variant", ARCHS)
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
    """Dense layers, KV and states on the GPU; slot routes there too (Triton grouped GEMM for bf16
    slots, torch for the others), misses on the host: logits within the fp32 bound of the CPU
    engine's."""
    path = tiny_ckpt(arch, variant)
    want = Engine.from_pretrained(path, moe_backend="cpu").score(IDS)
    eng = Engine.from_pretrained(path, device="cuda", **kw)
    assert all(t.is_cuda for t in eng.model.backend.cache.store.values())
    assert eng.model.device.type == "cuda" and all(k.is_cuda for k in eng.kv.k if k is not None)
    assert_logits_close(eng.score(IDS), want, eng.model_config)
    eng.generate(IDS[:9], GREEDY)
    eng.model.backend.cache.check()
    t = eng.expert_stats()["total"]
    assert t["device_routes"] > 0


@pytest.mark.parametrize("arch,variant", ARCHS)
def test_cuda_dense_with_host_experts_matches_the_cpu_engine(tiny_ckpt, arch, variant):
    """moe_backend cpu on a GPU: everything but the experts on the GPU, every route on the host's
    kernels (x copied down, y up): logits within the fp32 bound, greedy decode runs."""
    path = tiny_ckpt(arch, variant)
    want = Engine.from_pretrained(path, moe_backend="cpu").score(IDS)
    eng = Engine.from_pretrained(path, device="cuda", moe_backend="cpu")
    assert eng.model.device.type == "cuda"
    assert all(t.device.type == "cpu" for t in eng.model.bank.tensors.values())
    assert_logits_close(eng.score(IDS), want, eng.model_config)
    out = eng.generate(IDS[:9], GREEDY)
    assert len(out[0].token_ids) == GREEDY.max_tokens


def test_probe_measures_the_layer_steps_fixed_costs():
    """ft probe on CUDA times one layer step through the expert cache (all hits) and one through the
    CPU-only path, with the engine's own classes; both positive and below a second."""
    from ft_core.experts.probe import step_costs

    cached_s, host_s = step_costs("cuda", steps=10)
    assert 0 < cached_s < 1 and 0 < host_s < 1


def test_cuda_graphs_replay_and_follow_a_resize(tiny_ckpt):
    """Decode-sized steps replay the captured MoE layer step (experts/captured.py) on the GPU; an
    elastic resize of the expert cache (real cudaMemGetInfo behind it) drops and recaptures them;
    logits stay within the fp32 bound of the CPU engine's before and after, with graphs and without
    (not bit-equal to each other: the slot GEMM's float atomics add in the order the GPU runs them)."""
    path = tiny_ckpt("qwen3_moe")
    base = Engine.from_pretrained(path, moe_backend="cpu")
    chunks = [IDS[:6], IDS[6:12], IDS[12:18]]
    want = [base.score(c) for c in chunks]
    for graphs in (True, False):
        eng = Engine.from_pretrained(
            path, device="cuda", moe_backend="fill", moe_cache_fraction=0.5, cuda_graphs=graphs
        )
        b = eng.model.backend
        got = [eng.score(c) for c in chunks]
        before = b.graphs.replays
        eng.resize(experts=5 * b.cache.bank.nbytes_per_id())
        assert b.cache.num_slots == 5
        got += [eng.score(c) for c in chunks]
        b.cache.check()
        assert (before > 0 and b.graphs.replays > before) == graphs
        for g, w in zip(got, want + want):
            assert_logits_close(g, w, eng.model_config)


@pytest.mark.parametrize("join", ["callback", "flag"])
@pytest.mark.parametrize(
    "kw",
    [
        dict(moe_backend="fill", moe_cache_slots=5),
        dict(moe_backend="hybrid", moe_bandwidth_ratio=0.5, moe_cache_fraction=0.25),
    ],
    ids=["fill-5slots", "hybrid-quarter"],
)
def test_cuda_cpu_routes_joined_in_the_stream(tiny_ckpt, join, kw):
    """cpu_join callback / flag on the GPU (experts/joined.py): replayed decode-sized steps run their
    CPU routes in C++ from page-locked buffers in the stream's order (a host node, or the flag kernels
    and the branch's polling thread); logits within the fp32 bound of the CPU engine's, greedy decode
    runs, every replayed step went through the branch, and its counters add up."""
    path = tiny_ckpt("qwen3_moe")
    base = Engine.from_pretrained(path, moe_backend="cpu")
    chunks = [IDS[:6], IDS[6:12], IDS[12:18]]
    want = [base.score(c) for c in chunks]
    eng = Engine.from_pretrained(path, device="cuda", cpu_join=join, **kw)
    b = eng.model.backend
    for c, w in zip(chunks, want):
        assert_logits_close(eng.score(c), w, eng.model_config)
    eng.generate(IDS[:9], GREEDY)
    torch.cuda.synchronize()
    branches = [br for br in b.graphs.branches.values() if br is not None]
    assert branches and b.graphs.replays > 0
    assert sum(br.branch.runs() for br in branches) == b.graphs.replays
    for br in branches:
        br.check()
    t = eng.expert_stats()["total"]
    assert t["routes"] == t["device_routes"] + t["cpu_routes"] and t["cpu_routes"] > 0


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3_5_moe", "deepseek_v3", "gpt_oss"])
@pytest.mark.parametrize("join", ["callback", "flag"])
@pytest.mark.parametrize("n", [1, 3, 4])
def test_cuda_decode_graphs(tiny_ckpt, arch, join, n):
    """decode_graphs on the GPU (decode_graph.py): a whole decode step captured once per batch bucket
    (1, 3 in a bucket of 4 with a repeated row, 4) with its MoE steps' CPU routes joined in the stream,
    then replayed: the same greedy tokens as the eager GPU engine and every step's logits within the
    fp32 bound of its; the graph replayed every step after the bucket's eager ones; the cache's host
    clock kept up with the one the graph ticks on the GPU; the branches met no error. qwen3_5_moe: Gated
    DeltaNet layers, their live states at slots read on the device; deepseek_v3: MLA's absorbed decode
    over the cached rows (``attn_mla.latent_decode``); gpt_oss: windows kept as state, each ring written
    and read in place by slots and positions read on the device (``attn_window.window_decode``)."""
    from ft_core.decode_graph import EAGER_STEPS

    path = tiny_ckpt(arch)
    prompts = [IDS[:9], IDS[5:17], IDS[20:26], IDS[30:38]][:n]
    runs = []
    for graphs in (False, True):
        eng = Engine.from_pretrained(
            path, device="cuda", moe_backend="hybrid", moe_bandwidth_ratio=0.5,
            moe_cache_fraction=0.25, cpu_join=join, decode_graphs=graphs,
        )  # fmt: skip
        logits = sampled_logits(eng)
        toks = [o.token_ids for o in eng.generate(prompts, GREEDY)]
        torch.cuda.synchronize()
        b = eng.model.backend
        for br in b.joined_branches():
            br.check()
        b.cache.check()
        assert b.cache.clock == int(b.cache.clock_t)
        runs.append((toks, logits, eng))
    g = runs[1][2].runner.graphs
    # (a step that takes a state checkpoint at an anchor token runs eagerly)
    want = GREEDY.max_tokens - 1 - EAGER_STEPS
    state = arch in ("qwen3_5_moe", "gpt_oss")
    assert g.enabled and (g.replays == want or state and 0 < g.replays), g.replays
    assert runs[0][0] == runs[1][0]
    assert runs[0][1].keys() == runs[1][1].keys()
    for k, want in runs[0][1].items():
        assert_logits_close(
            torch.stack(runs[1][1][k]), torch.stack(want), runs[1][2].model_config, tokens=12 + 12
        )  # contexts of up to 12 prompt and 12 generated tokens
