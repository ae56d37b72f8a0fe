"""The expert memory hierarchy never changes results: logits and greedy tokens equal across miss
policies, victim policies and cache sizes (device="cpu": the slots are a separate memory region)."""

from pathlib import Path

import pytest
import torch
from bounds import assert_logits_close

from ft_core import Engine, FTError, SamplingParams

IDS = [(i * 37 + 11) % 500 + 3 for i in range(40)]
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
POLICIES = [("fill", None), ("hybrid", 0.3), ("hybrid", 2.0), ("static", None)]
FRACTIONS = ["1slot", 0.1, 0.5, 1.0]


@pytest.fixture(
    scope="module",
    params=[("qwen3_moe", None), ("deepseek_v3", "fp8"), ("gpt_oss", "mxfp4")],
    ids=lambda v: v[0] if v[1] is None else f"{v[0]}-{v[1]}",
)
def ckpt(request, tiny_ckpt):
    path = tiny_ckpt(*request.param)
    eng = Engine.from_pretrained(path, moe_backend="cpu")
    return path, eng.score(IDS), eng.generate(IDS[:9], GREEDY)[0].token_ids


@pytest.mark.parametrize("victims", ["lru", "reuse", "nextuse"])
@pytest.mark.parametrize("fraction", FRACTIONS, ids=str)
@pytest.mark.parametrize("policy,ratio", POLICIES, ids=lambda v: str(v))
def test_policies_and_cache_sizes_keep_outputs(ckpt, policy, ratio, fraction, victims):
    path, want_logits, want_tokens = ckpt
    size = {"moe_cache_slots": 1} if fraction == "1slot" else {"moe_cache_fraction": fraction}
    eng = Engine.from_pretrained(
        path, moe_backend=policy, moe_bandwidth_ratio=ratio, moe_cache_policy=victims, **size
    )
    got = eng.score(IDS)
    assert_logits_close(got, want_logits, eng.model_config)
    assert eng.generate(IDS[:9], GREEDY)[0].token_ids == want_tokens
    eng.model.backend.cache.check()
    st = eng.expert_stats()
    t = st["total"]
    assert st["backend"] == policy and t["routes"] == t["device_routes"] + t["cpu_routes"] > 0
    if policy == "fill" and fraction == 1.0:
        assert (
            t["cpu_routes"] == 0 and t["evictions"] == 0
        )  # everything fits: each expert copied once
    if policy == "static":
        assert t["fills"] == 0


def test_cache_size_in_bytes(tiny_ckpt):
    eng = Engine.from_pretrained(tiny_ckpt("qwen3_moe"), moe_backend="fill", moe_cache_slots=None)
    per = eng.model.bank.nbytes_per_id()
    eng = Engine.from_pretrained(
        tiny_ckpt("qwen3_moe"), moe_backend="fill", moe_cache_bytes=3 * per + per // 2
    )
    assert eng.model.backend.cache.num_slots == 3
    with pytest.raises(FTError, match="holds no expert"):
        Engine.from_pretrained(tiny_ckpt("qwen3_moe"), moe_backend="fill", moe_cache_bytes=per // 2)


def test_default_backend_without_accelerator_is_cpu(tiny_ckpt):
    eng = Engine.from_pretrained(tiny_ckpt("qwen3_moe"))
    assert eng.config.resolved_moe_backend == "cpu" and eng.expert_stats() == {}


def test_bad_hierarchy_options(tiny_ckpt):
    with pytest.raises(FTError, match="moe_bandwidth_ratio"):
        Engine.from_pretrained(tiny_ckpt("qwen3_moe"), moe_backend="hybrid")
    with pytest.raises(FTError, match="moe_backend 'lru' is not one of"):
        Engine.from_pretrained(tiny_ckpt("qwen3_moe"), moe_backend="lru")
    with pytest.raises(FTError, match="moe_cache_fraction"):
        Engine.from_pretrained(tiny_ckpt("qwen3_moe"), moe_backend="fill", moe_cache_fraction=1.5)


def test_triton_device_backend_under_interpreter(tiny_ckpt):
    """Slot routes computed by the Triton grouped expert kernel (TRITON_INTERPRET=1 on the CPU)."""

    path = tiny_ckpt("qwen3_moe")
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from bounds import assert_logits_close
from ft_core import Engine
ids = {IDS[:24]!r}
want = Engine.from_pretrained({str(path)!r}).score(ids)
eng = Engine.from_pretrained({str(path)!r}, moe_backend="fill", moe_cache_fraction=0.5, device_expert_impl="triton")
assert eng.model.backend.device_backend.name == "triton"
got = eng.score(ids)
assert_logits_close(got, want, eng.model_config)
assert eng.expert_stats()["total"]["device_routes"] > 0
print("ok")
"""
    _interpreted(code)


@pytest.mark.parametrize("policy,ratio", [("fill", None), ("hybrid", 0.3)])
def test_prefill_double_buffering(tiny_ckpt, policy, ratio):
    """With room for two layers, prefill loads layer l+1's experts while layer l computes; outputs equal."""
    path = tiny_ckpt("qwen3_moe")
    base = Engine.from_pretrained(path, moe_backend="cpu")
    kw = dict(
        moe_backend=policy, moe_bandwidth_ratio=ratio, moe_cache_slots=16
    )  # 2 layers x 8 experts
    on = Engine.from_pretrained(path, **kw)
    off = Engine.from_pretrained(path, moe_prefill_overlap=False, **kw)
    want = base.score(IDS)
    for eng in (on, off):
        assert_logits_close(eng.score(IDS), want, eng.model_config)
        eng.model.backend.cache.check()
    layer1 = on.expert_stats()["layers"][1]
    assert (
        layer1["prefetched"] > 0 and layer1["cpu_routes"] == 0
    )  # every expert of layer 1 was loaded ahead
    assert "prefetched" not in off.expert_stats()["layers"][1]
    assert (
        on.generate(IDS[:20], GREEDY)[0].token_ids == base.generate(IDS[:20], GREEDY)[0].token_ids
    )


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    "kw",
    [
        dict(
            moe_backend="fill", moe_cache_slots=16
        ),  # prefill double-buffers (2 layers x 8 experts)
        dict(
            moe_backend="hybrid", moe_bandwidth_ratio=0.5, moe_cache_slots=5
        ),  # evictions, CPU misses
        dict(moe_backend="static", moe_cache_slots=6),  # the hot set copied once
    ],
    ids=["fill-overlap", "hybrid-small", "static"],
)
def test_late_copies_never_change_the_result(tiny_ckpt, kw, seed):
    """The fills and prefetches run on the device's copy stream (a thread on the CPU stand-in), the
    slot GEMM on its compute stream behind them, the CPU routes meanwhile on the caller. With random
    delays before every copy, the logits and tokens are those of the same engine without delays, bit
    for bit: a slot is never read before its copy lands, and the partial sums are added in one order."""
    from ft_core.device import CpuDevice

    path = tiny_ckpt("qwen3_moe")
    plain = Engine.from_pretrained(path, **kw)
    late = Engine.from_pretrained(path, **kw)
    late.model.backend.dev = CpuDevice(delay=0.003, seed=seed)
    out = []
    for eng in (plain, late):
        out.append((eng.score(IDS), eng.generate(IDS[:20], GREEDY)[0].token_ids))
        eng.model.backend.cache.check()
    assert torch.equal(out[1][0], out[0][0])
    assert out[1][1] == out[0][1]
    t = late.expert_stats()["total"]
    assert t["device_routes"] > 0  # slots were read
    assert kw["moe_backend"] == "static" or t["fills"] > 0  # (static: its hot set is copied once)


def test_triton_cache_control_in_the_engine_under_interpreter(tiny_ckpt):
    """cache_control_impl="triton" (the default on CUDA) runs every layer step's control through the
    Triton kernel (TRITON_INTERPRET=1 on the CPU): same victims and copy lists as the torch step, so
    logits, tokens and every counter equal the torch-control engine's, bit for bit."""

    path = tiny_ckpt("qwen3_moe")
    code = f"""
import torch
from ft_core import Engine, SamplingParams
ids = {IDS!r}
greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
cases = [dict(moe_backend="fill", moe_cache_slots=16, moe_cache_policy="reuse"),
         dict(moe_backend="hybrid", moe_bandwidth_ratio=0.5, moe_cache_slots=5, moe_cache_policy="lru"),
         dict(moe_backend="static", moe_cache_slots=6)]
for kw in cases:
    out = []
    for impl in ("torch", "triton"):
        eng = Engine.from_pretrained({str(path)!r}, cache_control_impl=impl, **kw)
        assert eng.model.backend.cache.control_impl == impl
        out.append((eng.score(ids), eng.generate(ids[:12], greedy)[0].token_ids, eng.expert_stats()["total"]))
        eng.model.backend.cache.check()
    assert torch.equal(out[0][0], out[1][0]), kw
    assert out[0][1] == out[1][1], kw
    keys = ("routes", "device_routes", "hits", "misses", "fills", "evictions", "bytes_copied", "prefetched")
    assert {{k: out[0][2].get(k) for k in keys}} == {{k: out[1][2].get(k) for k in keys}}, (kw, out[0][2], out[1][2])
print("ok")
"""
    _interpreted(code)


def test_queued_layer_step_under_interpreter(tiny_ckpt):
    """Decode-sized steps with the Triton control kernel and the Triton slot GEMM take the queued path
    (control, slot-copy kernel and GEMM queued with nothing read back before them; the GEMM skips the
    CPU routes itself), replayed from captured graphs once a shape was seen (the stand-in's graphs
    reuse their output tensors as CUDA's do): logits, tokens and every counter equal those of the
    path that reads the routes back first (torch control), bit for bit, with graphs and without --
    with nextuse's admission sending misses to the CPU, with hybrid's split, and with random delays
    on the stand-in's streams."""

    path = tiny_ckpt("qwen3_moe")
    code = f"""
import torch
from ft_core import Engine, SamplingParams
from ft_core.device import CpuDevice
from ft_core.experts.cached import CachedBackend
calls = [0]
plain = CachedBackend._run_queued
def counted(self, *a):
    calls[0] += 1
    return plain(self, *a)
CachedBackend._run_queued = counted
ids = {IDS!r}
greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
cases = [dict(moe_backend="fill", moe_cache_slots=5),
         dict(moe_backend="hybrid", moe_bandwidth_ratio=0.5, moe_cache_slots=5, moe_cache_policy="lru"),
         dict(moe_backend="fill", moe_cache_slots=16, moe_cache_policy="reuse")]
keys = ("routes", "device_routes", "cpu_routes", "hits", "misses", "fills", "evictions", "bytes_copied")
for kw in cases:
    out = []
    for impl, delay, graphs in (("torch", None, True), ("triton", None, False), ("triton", 0.002, True)):
        calls[0] = 0
        eng = Engine.from_pretrained({str(path)!r}, cache_control_impl=impl, device_expert_impl="triton",
                                     cuda_graphs=graphs, **kw)
        b = eng.model.backend
        if delay:
            b.dev = CpuDevice(delay=delay, seed=1)
        out.append((eng.score(ids[:12]), eng.generate(ids[:12], greedy)[0].token_ids, eng.expert_stats()["total"]))
        b.cache.check()
        assert (calls[0] > 0) == (impl == "triton"), (kw, impl, calls)
        # decode steps of one shape: the first runs uncaptured, the second is captured, the rest replay
        assert (b.graphs.replays >= 4) == (impl == "triton" and graphs), (kw, impl, b.graphs.replays)
    for o in out[1:]:
        assert torch.equal(out[0][0], o[0]), kw
        assert out[0][1] == o[1], kw
        assert {{k: out[0][2].get(k) for k in keys}} == {{k: o[2].get(k) for k in keys}}, (kw, out[0][2], o[2])
    assert kw["moe_cache_slots"] == 16 or out[0][2]["cpu_routes"] > 0, kw
print("ok")
"""
    _interpreted(code)


def test_cpu_routes_joined_in_the_stream_under_interpreter(tiny_ckpt):
    """cpu_join callback / flag (experts/joined.py): a replayed step's CPU routes run in C++ from the
    branch's buffers, queued in the stream order (the stand-in's host function: run on the caller's
    thread; the flag: the branch's polling thread, answered through its done word) while the compute
    stream runs the slot GEMM -- with random delays on the stand-in's copy stream too. Logits, tokens and
    every counter equal the host join's, bit for bit; the branches ran every replayed step; a host backend
    the branch cannot stand for (torch's experts) keeps the host join."""

    path = tiny_ckpt("qwen3_moe")
    code = f"""
import torch
from ft_core import Engine, SamplingParams
from ft_core.device import CpuDevice
ids = {IDS!r}
greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
keys = ("routes", "device_routes", "cpu_routes", "hits", "misses", "fills", "evictions", "bytes_copied")
cases = [dict(moe_backend="fill", moe_cache_slots=5),
         dict(moe_backend="hybrid", moe_bandwidth_ratio=0.5, moe_cache_slots=5, moe_cache_policy="lru")]
variants = [("host", None, "auto"), ("callback", None, "auto"), ("flag", 0.002, "auto"),
            ("callback", None, "torch")]
for kw in cases:
    out = []
    for join, delay, impl in variants:
        eng = Engine.from_pretrained({str(path)!r}, cache_control_impl="triton", device_expert_impl="triton",
                                     cpu_join=join, expert_impl=impl, **kw)
        b = eng.model.backend
        if delay:
            b.dev = CpuDevice(delay=delay, seed=1)
        out.append((eng.score(ids[:12]), eng.generate(ids[:12], greedy)[0].token_ids, eng.expert_stats()["total"]))
        branches = [br for br in b.graphs.branches.values() if br is not None]
        runs = sum(br.branch.runs() for br in branches)
        if join == "host" or impl == "torch":
            assert not branches, (kw, join, impl)
        else:  # every replayed step went through a branch, none read back by the host
            assert b.graphs.replays >= 4 and runs == b.graphs.replays, (kw, join, b.graphs.replays, runs)
        for br in branches:
            br.check()
            br.close()
    for (join, _, impl), o in zip(variants[1:-1], out[1:-1]):  # (torch's experts round otherwise)
        assert torch.equal(out[0][0], o[0]), (kw, join, impl)
        assert out[0][1] == o[1], (kw, join, impl)
        assert {{k: out[0][2].get(k) for k in keys}} == {{k: o[2].get(k) for k in keys}}, (kw, join, out[0][2], o[2])
    assert out[0][2]["cpu_routes"] > 0, kw
print("ok")
"""
    _interpreted(code)


def test_graphs_follow_an_elastic_resize_under_interpreter(tiny_ckpt):
    """Resizing the expert cache reallocates its tables and slots, which the captured graphs read: the
    graphs are dropped and captured again, and every step before and after equals the same engine's
    run without graphs, bit for bit."""

    path = tiny_ckpt("qwen3_moe")
    code = f"""
import torch
from ft_core import Engine
ids = {IDS!r}
out = []
for graphs in (True, False):
    eng = Engine.from_pretrained({str(path)!r}, moe_backend="fill", moe_cache_slots=12,
                                 cache_control_impl="triton", device_expert_impl="triton", cuda_graphs=graphs)
    b = eng.model.backend
    per = b.cache.bank.nbytes_per_id()
    got = [eng.score(ids[:6]), eng.score(ids[6:12]), eng.score(ids[12:18])]
    before = b.graphs.replays
    eng.resize(experts=5 * per)
    assert b.cache.num_slots == 5 and not b.graphs._graphs
    got += [eng.score(ids[:6]), eng.score(ids[6:12]), eng.score(ids[12:18])]
    b.cache.check()
    assert (before > 0 and b.graphs.replays > before) == graphs, (before, b.graphs.replays)
    out.append(got)
for a, b in zip(*out):
    assert torch.equal(a, b)
print("ok")
"""
    _interpreted(code)


DECODE_GRAPH_RUN = """
import sys, torch
sys.path.insert(0, TESTS)
from bounds import assert_logits_close
from engine_spy import sampled_logits
from ft_core import Engine, SamplingParams
from ft_core.device import CpuDevice
ids = IDS
greedy = SamplingParams(max_tokens=7, temperature=0.0, ignore_eos=True)
CTX = 12 + 7  # the longest context a sampled row had (prompt and generated tokens)
keys = ("routes", "device_routes", "cpu_routes", "hits", "misses", "fills", "evictions", "bytes_copied")

def run(prompts, delay=None, resize=None, path=None, **kw):
    eng = Engine.from_pretrained(path or PATH, cache_control_impl="triton", device_expert_impl="triton", **kw)
    b = eng.model.backend
    if delay:
        b.dev = CpuDevice(delay=delay, seed=1)
        if eng.runner.graphs is not None:
            eng.runner.graphs.dev = b.dev
    rows = sampled_logits(eng)
    toks = [o.token_ids for o in eng.generate(prompts, greedy)]
    if resize:  # the cache's tables and slots move: its graphs and the decode graphs are captured again
        eng.resize(experts=resize * b.cache.bank.nbytes_per_id())
        toks += [o.token_ids for o in eng.generate(prompts, greedy)]
    b.cache.check()
    assert b.cache.clock == int(b.cache.clock_t), (b.cache.clock, b.cache.clock_t)  # the host's copy kept up
    for br in b.joined_branches():
        br.check()
        br.close()
    logits = [torch.stack(r) for _, r in sorted(rows.items())]  # each sequence's [steps, V]
    return eng, toks, logits, eng.expert_stats()["total"]
"""


def test_decode_graphs_under_interpreter(tiny_ckpt):
    """decode_graphs (decode_graph.py) on the stand-in, whose capture replays the step's Python each time:
    the static bucket inputs, rows past the batch repeating row 0, each MoE step's work launched inline
    (its joined branch, the cache clock ticked on the device and the host's copy advanced per replay),
    and graphs dropped when the expert cache is resized; a hybrid model (Qwen3.5-MoE: Gated DeltaNet
    states at slots read on the device) with steps that take a state checkpoint run eagerly between
    replays; a latent-attention one (DeepSeek-V3); GPT-OSS with its windows kept as state (rings written
    and read by the slots and positions on the device), its contexts past the window. A full bucket (4 sequences) gives every step's
    logits, the tokens and every counter of the eager engine, bit for bit, with copy-stream delays; a
    padded one (3 in a bucket of 4) the same tokens and logits within the fp32 bound (another batch's
    rounding), its counters larger by the repeated rows' routes. Where a step cannot be captured (torch's
    experts: no joined branch) the capture fails over to eager steps with the same results."""

    path, path35, pathds, pathoss = (
        tiny_ckpt("qwen3_moe"),
        tiny_ckpt("qwen3_5_moe"),
        tiny_ckpt("deepseek_v3"),
        tiny_ckpt("gpt_oss"),
    )
    code = (
        f"TESTS = {str(Path(__file__).resolve().parent)!r}\nPATH = {str(path)!r}\nIDS = {IDS!r}\n"
        f"PATH35 = {str(path35)!r}\nPATHDS = {str(pathds)!r}\nPATHOSS = {str(pathoss)!r}\n"
        + DECODE_GRAPH_RUN
        + """
four = [ids[:9], ids[5:17], ids[20:26], ids[30:38]]
for kw, delay in ((dict(moe_backend="fill", moe_cache_slots=5, cpu_join="callback"), None),
                  (dict(moe_backend="hybrid", moe_bandwidth_ratio=0.5, moe_cache_slots=5, cpu_join="flag"), 0.002)):
    _, t0, l0, s0 = run(four, **kw)
    eng, t1, l1, s1 = run(four, delay=delay, decode_graphs=True, **kw)
    g = eng.runner.graphs
    assert g.replays == 4 and t0 == t1, (kw, g.replays)  # 6 decode steps: 2 eager, then captured
    assert all(torch.equal(a, b) for a, b in zip(l0, l1)) and len(l0) == len(l1) == 4, kw
    assert {k: s0[k] for k in keys} == {k: s1[k] for k in keys}, (s0, s1)
    assert s1["cpu_routes"] > 0, kw
    # three sequences in the bucket of four
    _, t0, l0, s0 = run(four[:3], resize=4, **kw)
    eng, t1, l1, s1 = run(four[:3], resize=4, decode_graphs=True, **kw)
    assert t0 == t1 and eng.runner.graphs.replays == 8, (kw, eng.runner.graphs.replays)
    for a, b in zip(l0, l1):
        assert_logits_close(b, a, eng.model_config, tokens=CTX)
    assert s1["routes"] > s0["routes"] and s1["misses"] == s0["misses"], (s0, s1)
# a hybrid model: its Gated DeltaNet layers' live states at the slots read on the device; checkpoints
# every 8 tokens, whose steps run eagerly between replays
kw = dict(moe_backend="hybrid", moe_bandwidth_ratio=0.5, moe_cache_slots=5, cpu_join="callback",
          checkpoint_policy="every_n", checkpoint_interval=8)
_, t0, l0, _ = run(four[:3], path=PATH35, **kw)
eng, t1, l1, _ = run(four[:3], path=PATH35, decode_graphs=True, **kw)
assert t0 == t1 and 0 < eng.runner.graphs.replays < 4, eng.runner.graphs.replays
for a, b in zip(l0, l1):
    assert_logits_close(b, a, eng.model_config, tokens=CTX)
# latent attention (DeepSeek-V3's MLA): the absorbed decode over the cached rows
kw = dict(moe_backend="fill", moe_cache_slots=5, cpu_join="callback")
_, t0, l0, _ = run(four[:3], path=PATHDS, **kw)
eng, t1, l1, _ = run(four[:3], path=PATHDS, decode_graphs=True, **kw)
assert t0 == t1 and eng.runner.graphs.replays == 4, eng.runner.graphs.replays
for a, b in zip(l0, l1):
    assert_logits_close(b, a, eng.model_config, tokens=CTX)
# GPT-OSS, its sliding windows (8 tokens) kept as state: the rings at the slots and positions read on
# the device, every context past its window within the run
_, t0, l0, _ = run(four[:3], path=PATHOSS, **kw)
eng, t1, l1, _ = run(four[:3], path=PATHOSS, decode_graphs=True, **kw)
assert eng.runner.state_layout is not None and eng.model.kv_bytes_per_token(torch.float32) > 0
# (a step that snapshots the rings into a checkpoint runs eagerly)
assert t0 == t1 and 0 < eng.runner.graphs.replays <= 4, eng.runner.graphs.replays
for a, b in zip(l0, l1):
    assert_logits_close(b, a, eng.model_config, tokens=CTX)
# a step that cannot be captured: the capture fails, decode goes on eagerly
kw = dict(moe_backend="fill", moe_cache_slots=5, cpu_join="callback", expert_impl="torch")
_, t0, l0, _ = run(four, **kw)
eng, t1, l1, _ = run(four, decode_graphs=True, **kw)
assert not eng.runner.graphs.enabled and eng.runner.graphs.replays == 0 and t0 == t1
assert all(torch.equal(a, b) for a, b in zip(l0, l1))
print("ok")
"""
    )
    _interpreted(code)


def test_decode_graphs_refused_where_steps_read_back(tiny_ckpt, caplog):
    """decode_graphs where a decode step must read the device back (the host joins the CPU routes, or
    the experts run on the host) keeps decode eager and says why."""
    path = tiny_ckpt("qwen3_moe")
    for kw, why in (
        (dict(moe_backend="fill", moe_cache_slots=5), "cpu_join host"),
        (dict(moe_backend="cpu"), "routed experts run on the host"),
        (
            dict(
                moe_backend="fill", moe_cache_slots=5, cpu_join="flag", record_routing="/dev/null"
            ),
            "record_routing",
        ),
    ):
        caplog.clear()
        eng = Engine.from_pretrained(path, decode_graphs=True, **kw)
        assert eng.runner.graphs is None, kw
        assert why in caplog.text, (kw, caplog.text)


def _interpreted(code: str) -> None:
    """Run ``code`` in a fresh process with Triton's interpreter on (set before triton is imported);
    it must print "ok"."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
