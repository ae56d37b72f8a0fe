"""The prepared GPU check of the CUDA expert tier: one command, a few minutes on one GPU.

    python benchmarks/gpu_check.py [--device cuda] [--out gpu_check.json] [--quick] [--skip-tests]

Needs torch (with CUDA), triton and ft's packages (``pip install --no-deps -e packages/ft-kernels
packages/ft-core`` over a system torch works; transformers is optional: without it the tiny
architecture checkpoints other than the demo are skipped, and said so). Downloads nothing. Steps:

1. environment: torch / CUDA / triton versions, the GPU, ft_kernels' CPU ISA;
2. ``ft probe`` on the device: B_H, B_P, B_H during a copy, the split step's fixed cost;
3. parity: logits of ``device=DEV`` (dense weights, KV, states and the expert cache on the GPU)
   against the CPU engine (``moe_backend="cpu"``) for every miss policy (fill, hybrid, static) and
   cache size (1 slot, 25 %, 100 %), and for the CPU-only expert policy (experts on the host's
   kernels, everything else on the GPU), on the demo model and tiny qwen3_moe / deepseek_v3-fp8 /
   gpt_oss-mxfp4 / qwen3_5_moe checkpoints, within tests/bounds.py's fp32 bound, scoring 40 tokens
   (prefill-sized layer steps) and 12 (decode-sized: the queued step and its graphs); and whole decode
   steps replayed from one graph (``decode_graphs``, demo, qwen3_moe, qwen3_5_moe, gpt_oss-mxfp4 (windows
   kept as state), 1 and 3 sequences, CPU routes
   joined by callback or flag) against the same engine's eager steps: tokens and every step's logits;
4. the tests marked ``cuda`` (the test files that carry the marker, run with ``-m cuda``);
5. timing on a random Qwen3-30B-A3B-shaped checkpoint (2 layers x 64 experts, ~1.3 GB bf16;
   ``--quick``: a small one): decode tok/s for cpu / fill / hybrid / auto at 3 cache sizes, hit
   rate, bytes copied a token, the host's share of the MoE step time; fill again with the queued
   layer step launched kernel by kernel ("fill/eager": graphs off) and with the step that reads the
   routes back before the GEMM ("fill/readback"); fill and hybrid with the CPU routes joined in the
   stream ("/callback": a host function; "/flag": a polled flag; the plain rows are the host join),
   and those joins with every decode step replayed from one graph ("/graph");
   the slot-copy kernel's fill rate against one cudaMemcpyAsync a row; and decode attention of that shape
   at 1-32 sequences and 1k-32k keys: the Triton kernel over the pools against the gather path, and the
   kernel replayed from a CUDA graph while the contexts grow; and prefill attention of that shape, chunks
   of 512-2048 tokens after up to 16k keys: the Triton kernel against the gather path.

Everything goes into one JSON (``--out``) and a short table on stdout. ``--device cpu`` runs the
same steps on the CPU stand-in (device/streams.py: the slots in host memory, streams as threads):
that is how CI keeps this script working (tests/test_gpu_check.py); its timings mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

import torch  # noqa: E402

IDS = [(i * 37 + 11) % 500 + 3 for i in range(40)]
POLICIES = [  # (name, Engine options)
    ("fill", dict(moe_backend="fill")),
    ("cpu", dict(moe_backend="cpu")),
    ("hybrid", dict(moe_backend="hybrid", moe_bandwidth_ratio=0.5)),
    ("static", dict(moe_backend="static")),
    # the CPU routes of replayed decode-sized steps joined in the stream (experts/joined.py)
    ("fill/callback", dict(moe_backend="fill", cpu_join="callback")),
    ("hybrid/flag", dict(moe_backend="hybrid", moe_bandwidth_ratio=0.5, cpu_join="flag")),
]
# the timing rows at each cache size (besides cpu): policy, then how the step runs (module docstring)
TIMED = (
    "fill",
    "hybrid",
    "auto",
    "fill/eager",
    "fill/readback",
    "fill/callback",
    "fill/flag",
    "hybrid/callback",
    "hybrid/flag",
    "fill/callback/graph",
    "fill/flag/graph",
    "hybrid/flag/graph",
)
SIZES = [
    ("1slot", dict(moe_cache_slots=1)),
    ("25%", dict(moe_cache_fraction=0.25)),
    ("100%", dict(moe_cache_fraction=1.0)),
]


def _error(e: BaseException) -> str:
    """The exception and where it was raised in ft's code (the innermost frame under ROOT): the
    JSON comes back from a machine nobody can log into."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(str(ROOT))]
    where = (
        f" at {Path(frames[-1].filename).relative_to(ROOT)}:{frames[-1].lineno}" if frames else ""
    )
    lines = str(e).strip().splitlines() or [""]
    msg = lines[0][:200] + (f" ... {lines[-1][:300]}" if len(lines) > 1 else "")
    return f"{type(e).__name__}{where}: {msg}"


def environment(device: str) -> dict:
    import ft_kernels

    out = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "cpu_isa": ft_kernels.active_isa(),
        "threads": ft_kernels.num_threads(),
    }
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    if device.startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
        out["cuda"] = torch.version.cuda
    return out


def tiny_models(tmp: Path, quick: bool) -> tuple[list[tuple[str, Path]], list[str]]:
    """(name, checkpoint) pairs, and why any were skipped."""
    from ft_core.demo import write_demo_model

    models, skipped = [("demo", write_demo_model(tmp / "demo"))], []
    if quick:
        return models, skipped
    try:
        import tiny_checkpoints
    except ImportError as e:  # transformers missing on a bare GPU box
        return models, [f"tiny architecture checkpoints: {e}"]
    archs = [
        ("qwen3_moe", None),
        ("deepseek_v3", "fp8"),
        ("gpt_oss", "mxfp4"),
        ("qwen3_5_moe", None),
    ]
    for arch, variant in archs:
        name = arch if variant is None else f"{arch}-{variant}"
        models.append((name, tiny_checkpoints.make_checkpoint(arch, tmp / name, variant)))
    return models, skipped


def parity(models, device: str, quick: bool) -> list[dict]:
    """Every policy x size x model: max |logit error| over the fp32 bound of tests/bounds.py."""
    from bounds import assert_logits_close

    from ft_core import Engine

    rows = []
    for name, path in models:
        base = Engine.from_pretrained(path, moe_backend="cpu")
        # 40 tokens (prefill-sized layer steps) and 12 twice (decode-sized: the queued layer step,
        # replayed from graphs from its shape's second sighting on)
        want = [base.score(IDS), base.score(IDS[:12]), base.score(IDS[12:24])]
        for pname, pkw in POLICIES[:1] if quick else POLICIES:
            for sname, skw in SIZES[:1] if pname == "cpu" else SIZES:  # cpu: no cache to size
                row = {"model": name, "policy": pname, "cache": sname}
                try:
                    kw = {**pkw, **({} if pname == "cpu" else skw)}
                    eng = Engine.from_pretrained(path, device=device, **kw)
                    got = [eng.score(IDS), eng.score(IDS[:12]), eng.score(IDS[12:24])]
                    row["max_abs_err"] = max(float((g - w).abs().max()) for g, w in zip(got, want))
                    for g, w in zip(got, want):
                        assert_logits_close(g, w, eng.model_config)
                    row.update(ok=True, dense_device=str(eng.model.device))
                    if pname != "cpu":
                        eng.model.backend.cache.check()
                        t = eng.expert_stats()["total"]
                        row.update(device_routes=t["device_routes"], cpu_routes=t["cpu_routes"])
                        branches = eng.model.backend.graphs.branches.values()
                        row["joined_steps"] = sum(b.branch.runs() for b in branches if b)
                except Exception as e:  # noqa: BLE001 -- recorded, the check goes on
                    row.update(ok=False, error=_error(e))
                rows.append(row)
                print(
                    f"  parity {name:16s} {pname:13s} {sname:6s} "
                    f"{'ok' if row['ok'] else 'FAIL ' + row['error']}",
                    flush=True,
                )
    return rows


def graph_parity(models, device: str, quick: bool) -> list[dict]:
    """decode_graphs (decode_graph.py) against the same engine's eager decode on ``device``, for the
    models whose steps it captures (the demo, qwen3_moe, the Gated DeltaNet hybrid qwen3_5_moe and
    gpt_oss-mxfp4 with its windows kept as state), with
    the CPU routes joined by callback or flag: 1 and 3 sequences (the latter in a bucket of 4, its last
    row repeating the first), greedy: the same tokens, every step's logits within the fp32 bound, and
    how many steps were replayed."""
    from bounds import assert_logits_close
    from engine_spy import sampled_logits

    from ft_core import Engine, SamplingParams

    greedy = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    rows = []
    for name, path in models:
        if name not in ("demo", "qwen3_moe", "qwen3_5_moe", "gpt_oss-mxfp4"):
            continue
        for join in ("callback",) if quick else ("callback", "flag"):
            for n in (1, 3):
                row = {"model": name, "join": join, "sequences": n}
                try:
                    prompts = [IDS[i * 9 : i * 9 + 7 + i] for i in range(n)]
                    out = []
                    for graphs in (False, True):
                        eng = Engine.from_pretrained(
                            path, device=device, moe_backend="hybrid", moe_bandwidth_ratio=0.5,
                            moe_cache_fraction=0.25, cpu_join=join, decode_graphs=graphs,
                        )  # fmt: skip
                        logits = sampled_logits(eng)  # seq id -> the rows it sampled from
                        toks = [o.token_ids for o in eng.generate(prompts, greedy)]
                        for br in eng.model.backend.joined_branches():
                            br.check()
                        out.append((toks, logits, eng))
                    (t0, l0, _), (t1, l1, eng) = out
                    row["replays"] = eng.runner.graphs.replays
                    l0, l1 = ([torch.stack(r) for _, r in sorted(d.items())] for d in (l0, l1))
                    row["max_abs_err"] = max(float((a - b).abs().max()) for a, b in zip(l0, l1))
                    assert t0 == t1, (t0, t1)
                    ctx = len(prompts[-1]) + greedy.max_tokens  # the longest context sampled
                    for a, b in zip(l0, l1):
                        assert_logits_close(b, a, eng.model_config, tokens=ctx)
                    # (the stand-in without Triton takes no queued MoE step, so captures none)
                    assert row["replays"] > 0 or not device.startswith("cuda"), "no step replayed"
                    row["ok"] = True
                except Exception as e:  # noqa: BLE001 -- recorded, the check goes on
                    row.update(ok=False, error=_error(e))
                rows.append(row)
                print(
                    f"  decode graph {name:10s} {join:8s} {n} seq "
                    f"{'ok' if row['ok'] else 'FAIL ' + row['error']}",
                    flush=True,
                )
    return rows


def cuda_tests() -> dict:
    """pytest -m cuda over the test files that carry the marker (collecting every test file would
    import what a bare GPU machine may lack: the server's and the harnesses' dependencies)."""
    files = sorted(
        str(f)
        for d in [ROOT / "tests", *ROOT.glob("packages/*/tests")]
        for f in d.rglob("test_*.py")
        if "mark.cuda" in f.read_text()
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", *files]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    tail = (res.stdout + res.stderr)[-3000:]
    print(
        f"  pytest -m cuda: rc {res.returncode}: {tail.strip().splitlines()[-1] if tail.strip() else ''}"
    )
    return {"rc": res.returncode, "tail": tail}


def timing(tmp: Path, device: str, quick: bool, probe: dict) -> list[dict]:
    """Decode tok/s per policy and cache size on a random Qwen3-30B-A3B-shaped checkpoint."""
    from random_ckpt import Shape, write_checkpoint

    shape = (
        Shape(
            layers=2,
            hidden=256,
            moe_intermediate=128,
            experts=16,
            heads=4,
            kv_heads=2,
            head_dim=64,
            vocab=2048,
        )
        if quick
        else Shape(layers=2, experts=64)
    )
    path = tmp / "timing"
    write_checkpoint(path, shape)
    n = 8 if quick else 48
    prompts = [
        [(i * 7 + 3 + 101 * k) % 1000 + 1 for i in range(64)] for k in range(3)
    ]  # no shared prefix
    ratio = (probe["B_P"] / probe["B_H"]) if probe.get("B_P") else 0.5
    runs = [("cpu", dict(moe_backend="cpu"))] + [
        (
            p,
            dict(
                moe_backend=p.split("/")[0],
                moe_bandwidth_ratio=ratio if p.startswith("hybrid") else None,
                moe_cache_fraction=f,
            ),
        )
        for f in (0.125, 0.25, 0.5)
        for p in TIMED
    ]
    rows = []
    for name, kw in runs:
        try:
            rows.append(_time_one(path, device, name, kw, prompts, n))
        except Exception as e:  # noqa: BLE001 -- recorded, the check goes on
            rows.append({"policy": name, "error": _error(e)})
            print(f"  timing {name:15s} FAIL {rows[-1]['error']}", flush=True)
    return rows


def copy_rates(device: str) -> dict:
    """GB/s filling 8 slots of Qwen3-30B-A3B-sized bf16 experts (9.4 MB a row) from a bank page-locked
    as the loader does it (cudaHostRegister): the slot-copy kernel (the SMs read the bank through its
    unified address, the list's length read on the device) against one cudaMemcpyAsync a row (the copy
    engine; what the read-back path does). ``equal``: the kernel's slots hold the bank's rows."""
    if not device.startswith("cuda"):
        return {}
    from ft_kernels.gpu.slot_copy import copy_rows

    from ft_core.loader.ftw_io import pin_in_place

    class Owner:  # the registration lives as long as this object
        pass

    n, keep = 8, Owner()
    bank = torch.ones(2 * n, 3 * 768 * 2048, dtype=torch.bfloat16)
    bank[:, ::4096] = torch.arange(2 * n, dtype=torch.bfloat16)[:, None]
    out = {"pinned": pin_in_place([bank], keep)}
    store = torch.zeros(n, bank.shape[1], dtype=bank.dtype, device=device)
    ids = torch.arange(0, 2 * n, 2, device=device)
    slots = torch.arange(n, device=device)
    counts = torch.tensor([n, 0, 0, 0], dtype=torch.int32, device=device)
    pairs = list(zip(ids.tolist(), slots.tolist()))

    def kernel():
        copy_rows(bank, store, ids, slots, counts)

    def engine():
        for i, j in pairs:
            store[j].copy_(bank[i], non_blocking=True)

    nbytes = n * bank[0].numel() * bank.element_size()
    for name, fn in (("slot_copy_kernel", kernel), ("memcpy_per_row", engine)):
        try:
            store.zero_()
            fn()
            torch.cuda.synchronize()
            if name == "slot_copy_kernel":
                out["equal"] = bool(torch.equal(store.cpu(), bank[ids.cpu()]))
            t0 = time.perf_counter()
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
            out[name + "_GBps"] = 10 * nbytes / (time.perf_counter() - t0) / 1e9
        except Exception as e:  # noqa: BLE001 -- recorded, the check goes on
            out[name + "_error"] = _error(e)
    print("  copy rates:", out, flush=True)
    return out


def _kernel_vs_gather(row: dict, kernel, gather, reps: int) -> None:
    """Into ``row``: the largest difference of two attention calls' outputs, and each one's ms a call (mean
    of ``reps`` after one warm-up)."""
    row["max_abs_diff"] = (kernel().float() - gather().float()).abs().max().item()
    for name, fn in (("kernel", kernel), ("gather", gather)):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        row[name + "_ms"] = (time.perf_counter() - t0) / reps * 1e3


def attention_rates(device: str) -> dict:
    """Decode attention of Qwen3-30B-A3B's shape (32 query heads, 4 KV heads of 128, bf16 pools, pages of 16,
    shuffled) at a few batch sizes and contexts: the Triton kernel over the pools in place
    (``layers/attention.device_decode``) against the gather + ``paged_attention`` path that GPU decode steps
    took before it: ms a call, the kernel's K/V bytes a second, the largest difference; and the kernel
    captured in a CUDA graph, replayed after every context grew by one key on the device (``graph_equal``:
    the replay's output equals an eager launch's; ``graph_moved``: and differs from the capture's). Then
    prefill attention of the same shape (``device_prefill``) against the gather path (fp32, masked) that GPU
    prefills took before it, for chunks after longer contexts: ms, the kernel's TFLOP/s, the largest
    difference."""
    if not device.startswith("cuda"):
        return {}
    from ft_core.cache.kv_cache import KVLayout, PagedKVCache
    from ft_core.layers import attention
    from ft_core.layers.batch import ForwardBatch

    N, K, D, S = 32, 4, 128, 16
    out = {}
    for B, ctx in ((1, 4096), (1, 32768), (8, 4096), (32, 1024)):
        row: dict = {}
        try:
            per = -(-(ctx + 1) // S)  # room for one more key (the graph replay)
            kv = PagedKVCache([KVLayout(B * per, S, K, D, D, torch.bfloat16)], device)
            kv.k[0].normal_()
            kv.v[0].normal_()
            tables = torch.randperm(B * per).view(B, per).tolist()
            pos = [ctx - 1] * B
            slots = [t[p // S] * S + p % S for t, p in zip(tables, pos)]
            bt = ForwardBatch.one_token([0] * B, pos, slots, tables, S).to(torch.device(device))
            q = torch.randn(B, N, D, device=device, dtype=torch.bfloat16)

            def kernel():
                return attention.device_decode(
                    q, kv.k[0], kv.v[0], bt.page_table, bt.ctx_tensor(), D**-0.5
                )

            def gather():
                return attention.paged_attention(q, *kv.gather(0, bt.page_table), bt, D**-0.5)

            _kernel_vs_gather(row, kernel, gather, 20)
            row["kernel_GBps"] = 2 * B * ctx * K * D * 2 / row["kernel_ms"] / 1e6
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                kernel()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = kernel()
            graph.replay()
            before = captured.clone()
            bt.ctx_tensor().add_(1)  # every sequence one key longer, on the device
            graph.replay()
            torch.cuda.synchronize()
            row["graph_equal"] = bool(torch.equal(captured, kernel()))
            row["graph_moved"] = not bool(torch.equal(captured, before))
        except Exception as e:  # noqa: BLE001 -- recorded, the check goes on
            row["error"] = _error(e)
        out[f"B{B}_ctx{ctx}"] = row
        print(f"  attention B={B} ctx={ctx}:", row, flush=True)
    for L, ctx in (
        (512, 512),
        (512, 4096),
        (2048, 16384),
    ):  # a chunk of L new tokens, ctx keys with them
        row = {}
        try:
            per = -(-ctx // S)
            kv = PagedKVCache([KVLayout(per, S, K, D, D, torch.bfloat16)], device)
            kv.k[0].normal_()
            kv.v[0].normal_()
            table = torch.randperm(per).view(1, per)
            pos = torch.arange(ctx - L, ctx)
            bt = ForwardBatch(
                torch.zeros(L, dtype=torch.int64), pos, torch.zeros(L, dtype=torch.int64), table,
                [L], [ctx], S,
            ).to(torch.device(device))  # fmt: skip
            q = torch.randn(L, N, D, device=device, dtype=torch.bfloat16)

            def kernel():
                return attention.device_prefill(q, kv.k[0], kv.v[0], bt, D**-0.5)

            def gather():
                return attention.paged_attention(q, *kv.gather(0, bt.page_table), bt, D**-0.5)

            _kernel_vs_gather(row, kernel, gather, 5)
            # causal: each new token against the keys up to it
            flops = 4 * N * D * L * (ctx - L / 2)
            row["kernel_TFLOPs"] = flops / row["kernel_ms"] / 1e9
        except Exception as e:  # noqa: BLE001 -- recorded, the check goes on
            row["error"] = _error(e)
        out[f"prefill_L{L}_ctx{ctx}"] = row
        print(f"  prefill attention L={L} ctx={ctx}:", row, flush=True)
    return out


def _time_one(path: Path, device: str, name: str, kw: dict, prompts, n: int) -> dict:
    """One engine: warm up, then decode ``n`` tokens after a prompt; tok/s and the cache counters.
    Decode time = (prompt + n + 1 tokens) - (prompt + 1 token), so the prefill cancels."""
    from ft_core import Engine, SamplingParams

    how = set(name.split("/")[1:])
    if "eager" in how:  # the queued layer step launched kernel by kernel, no graphs
        kw = {**kw, "cuda_graphs": False}
    for join in how & {"callback", "flag"}:  # its CPU routes joined in the stream
        kw = {**kw, "cpu_join": join}
    if "graph" in how:  # each decode step replayed from one graph (decode_graph.py)
        kw = {**kw, "decode_graphs": True}
    eng = Engine.from_pretrained(path, device=device, dtype="bfloat16", **kw)
    if "readback" in how:  # the layer step that reads the routes back before the GEMM
        eng.model.backend.queued = False
    greedy = lambda k: SamplingParams(max_tokens=k, temperature=0.0, ignore_eos=True)  # noqa: E731
    eng.generate(prompts[0], greedy(2))  # warm: kernels compiled, slots filled
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    eng.generate(prompts[1], greedy(1))
    sync()
    t1 = time.perf_counter()
    eng.generate(prompts[2], greedy(n + 1))
    sync()
    t2 = time.perf_counter()
    decode_s = max(1e-9, (t2 - t1) - (t1 - t0))
    row = {
        "policy": name,
        # the policy the backend runs (auto's pick from the probe; "cpu" when it chose the host alone)
        "resolved": getattr(eng.model.backend, "policy", "cpu"),
        "cache_fraction": kw.get("moe_cache_fraction"),
        "decode_tok_s": n / decode_s,
        "prefill_tok_s": len(prompts[1]) / (t1 - t0),
    }
    st = eng.expert_stats()
    if st:
        t = st["total"]
        looked = t["hits"] + t["misses"]
        tokens = 3 * (len(prompts[0]) + 1) + n + 1  # the three generate calls' forwards
        busy = t["cpu_us"] + t["wait_us"]
        graphs = getattr(eng.model.backend, "graphs", None)
        decode = eng.runner.graphs
        row.update(
            graph_replays=graphs.replays if graphs is not None else 0,
            decode_graph_replays=decode.replays if decode is not None else None,
            joined_steps=sum(b.branch.runs() for b in graphs.branches.values() if b)
            if graphs is not None
            else 0,
            hit_rate=t["hits"] / looked if looked else None,
            bytes_copied_per_token=t["bytes_copied"] / tokens,
            cpu_share=t["cpu_us"] / busy if busy else None,
        )
    print(
        f"  timing {name:15s} cache {row['cache_fraction']!s:6s} decode {row['decode_tok_s']:8.1f} "
        f"tok/s  prefill {row['prefill_tok_s']:8.1f} tok/s  hit {row.get('hit_rate') or 0:.2f}  "
        f"replays {row.get('graph_replays', 0):4d}  "
        f"copied/token {(row.get('bytes_copied_per_token') or 0) / 1e6:.1f} MB",
        flush=True,
    )
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (the CI stand-in)")
    ap.add_argument("--out", default="gpu_check.json", help="the JSON written at the end")
    ap.add_argument(
        "--quick", action="store_true", help="demo model, fill only, small timing model"
    )
    ap.add_argument("--skip-tests", action="store_true", help="do not run pytest -m cuda")
    args = ap.parse_args(argv)
    if args.device != "cpu" and not torch.cuda.is_available():
        print(f"gpu_check: --device {args.device}: torch sees no CUDA device", file=sys.stderr)
        return 2
    from ft_core.experts.probe import probe

    t0 = time.perf_counter()
    report: dict = {"environment": environment(args.device)}
    print("environment:", json.dumps(report["environment"]))
    os.environ.setdefault("FT_CACHE_DIR", tempfile.mkdtemp(prefix="ft-gpu-check-cache-"))
    report["probe"] = probe("bf16", args.device, use_cache=False)
    print("probe:", {k: v for k, v in report["probe"].items() if k != "key"})
    with tempfile.TemporaryDirectory(prefix="ft-gpu-check-") as d:
        tmp = Path(d)
        models, report["skipped"] = tiny_models(tmp, args.quick)
        for why in report["skipped"]:
            print("  skipped:", why)
        report["parity"] = parity(models, args.device, args.quick)
        report["graph_parity"] = graph_parity(models, args.device, args.quick)
        report["cuda_tests"] = None if args.skip_tests else cuda_tests()
        report["copy_rates"] = copy_rates(args.device)
        report["attention"] = attention_rates(args.device)
        report["timing"] = timing(tmp, args.device, args.quick, report["probe"])
    ok = all(r["ok"] for r in report["parity"] + report["graph_parity"]) and (
        report["cuda_tests"] is None or report["cuda_tests"]["rc"] in (0, 5)
    )
    report["ok"], report["seconds"] = ok, time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"gpu_check: {'ok' if ok else 'FAILED'} in {report['seconds']:.0f} s; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
