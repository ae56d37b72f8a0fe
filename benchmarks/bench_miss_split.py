"""A timing model of the MoE miss split: predicted MoE time per decode token for the cpu, static,
fill and hybrid policies on the paper's machines (Table 1) and, optionally, this one.

    uv run python benchmarks/bench_miss_split.py [--trace trace.jsonl [--domain D]] [--victims lru|reuse|nextuse] [--json FILE]
        [--expert-mb 9.437184]
        [--fraction 0.5] [--bh GBs [--bp GBs]] [--prefill warm|skip] [--static-from trace|prefill|decode]

Every decode layer step of the trace is replayed (benchmarks/cache_sim.py, the same code as
bench_cache_policies.py; the global LRU is ft_core's ExpertCache) through a cache of
fraction * L * E slots, giving per step the distinct ids d, misses m and fills q. With b bytes per
expert, PCIe bandwidth B_P and host expert-kernel bandwidth B_H (GB/s = 1e9 B/s), and GPU compute
on resident experts taken as free, the MoE time of one step is
  cpu     d * b / B_H                       (no cache: every routed id runs on the host)
  static  m_static * b / B_H                (frozen hot set; misses run on the host)
  fill    m_fill * b / B_P                  (global cache, --victims lru, reuse or nextuse, every miss copied in)
  hybrid  max(q * b / B_P, (m - q) * b / B_H)   (same cache, q = clamp(round(m * B_P / B_H), 1, m), half up, copied
                                             while the host computes the rest, concurrently)
  belady  m_belady * b / B_P                (fill with Belady's optimal evictions: fill's floor)
summed over decode steps and divided by the decode tokens: ms per token (MoE experts only; dense
layers, attention and the hits' GPU compute are not in it). ``best`` is the fastest of the four
real policies (belady is a bound, not a policy). Without --bp there is no device on this machine,
so only cpu applies to it (every cache policy needs a device to hold the cache: n/a).
Without --trace a synthetic Zipf trace (Qwen3-30B-A3B-shaped: 48 layers, E=128, top-8) is used.
Default b: one Qwen3-30B-A3B bf16 expert, 3 * 2048 * 768 * 2 bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cache_sim as sim  # noqa: E402  (benchmarks/ is not a package)

from ft_core.experts.timing import choose_policy, step_seconds  # noqa: E402

# Table 1 of the paper: (machine, B_P GB/s, B_H GB/s)
MACHINES = [
    ("5090 server", 52.7, 77.3),
    ("4090", 25.1, 63.2),
    ("3090", 25.3, 56.7),
    ("5090 desktop", 49.0, 53.8),
    ("4060 laptop", 11.8, 47.5),
    ("PRO 6000", 51.5, 178.0),
]
QWEN3_30B_EXPERT_BYTES = 3 * 2048 * 768 * 2
POLICIES = ("cpu", "static", "fill", "hybrid")


def predict(
    trace, slots: int, b: float, machines, prefill="warm", static_from="trace", victims="lru"
) -> dict:
    """Per machine (name, B_P or None, B_H): seconds per decode token of each policy, and hybrid's split; the
    cache's victims (fill, hybrid) by ExpertCache's ``victims`` policy."""
    fill = sim.replay_lru(trace, slots, "fill", prefill=prefill, victim=victims)
    static = sim.replay_static(trace, sim.static_set(trace, slots, static_from))
    belady = sim.replay_belady(trace, slots, prefill=prefill)
    tok = max(1, trace.decode_tokens)
    rows = []
    for name, bp, bh in machines:
        P, Hb = (bp * 1e9 if bp else None), bh * 1e9
        r = {
            "machine": name,
            "bp_gbs": bp,
            "bh_gbs": bh,
            "ratio": bp / bh if bp else None,
            "cpu": step_seconds("cpu", fill.distinct, 0, 0, b, P, Hb) / tok,
        }
        if P is None:
            r.update(static=None, fill=None, hybrid=None, belady=None, hyb_cpu=None)
        else:
            hyb = sim.replay_lru(trace, slots, "hybrid", bp / bh, prefill=prefill, victim=victims)
            r.update(
                static=step_seconds("static", 0, static.misses, 0, b, P, Hb) / tok,
                fill=step_seconds("fill", 0, fill.misses, fill.misses, b, P, Hb) / tok,
                hybrid=sum(step_seconds("hybrid", 0, m, q, b, P, Hb) for _, m, q in hyb.per_step)
                / tok,
                belady=step_seconds("fill", 0, belady.misses, belady.misses, b, P, Hb) / tok,
                hyb_cpu=hyb.cpu_fraction,
                hyb_miss=hyb.miss_rate,
            )
        r["best"] = min((p for p in POLICIES if r[p] is not None), key=lambda p: r[p])
        # What the engine's ``auto`` would pick from (B_P, B_H) and the fill miss rate alone (no trace replay).
        r["auto"] = choose_policy(
            P, Hb, b, fill.distinct / max(1, len(fill.per_step)), fill.miss_rate
        )[0]
        rows.append(r)
    return {
        "trace": trace.source,
        "layers": trace.num_layers,
        "experts": trace.num_experts,
        "decode_tokens": trace.decode_tokens,
        "slots": slots,
        "fraction": slots / trace.num_ids,
        "expert_bytes": b,
        "prefill": prefill,
        "static_from": static_from,
        "victims": victims,
        "miss_rate": {
            "cpu": 1.0,
            "static": static.miss_rate,
            "fill": fill.miss_rate,
            "belady": belady.miss_rate,
        },
        "distinct_per_token": fill.distinct / tok,
        "rows": rows,
    }


def print_table(out: dict) -> None:
    mr = out["miss_rate"]
    print(f"trace: {out['trace']}")
    print(
        f"L={out['layers']} x E={out['experts']}, {out['decode_tokens']} decode tokens, "
        f"{out['distinct_per_token']:.1f} distinct experts routed per token; cache {out['slots']} slots "
        f"(fraction {out['fraction']:.3f}); expert {out['expert_bytes'] / 1e6:.3f} MB; prefill {out['prefill']}; "
        f"static from {out['static_from']}"
    )
    print(
        f"decode miss rates: static {mr['static']:.4f}  fill ({out['victims']}) {mr['fill']:.4f}  belady {mr['belady']:.4f}"
        "  (hybrid's own per machine below)"
    )
    cols = (
        "B_P",
        "B_H",
        "B_P/B_H",
        "cpu",
        "static",
        "fill",
        "hybrid",
        "belady",
        "hyb_miss",
        "hyb_cpu",
        "best",
        "auto",
    )
    print(f"{'ms/token':>14}  " + "  ".join(f"{c:>8}" for c in cols))
    for r in out["rows"]:
        f = lambda v, s=1e3, d=2: "n/a" if v is None else f"{v * s:.{d}f}"
        vals = [
            f(r["bp_gbs"], 1, 1),
            f(r["bh_gbs"], 1, 1),
            f(r["ratio"], 1),
            f(r["cpu"]),
            f(r["static"]),
            f(r["fill"]),
            f(r["hybrid"]),
            f(r["belady"]),
            f(r.get("hyb_miss"), 1, 3),
            f(r["hyb_cpu"], 1, 3),
            r["best"],
            r["auto"],
        ]
        print(f"{r['machine']:>14}  " + "  ".join(f"{v:>8}" for v in vals))
    print(
        "ms/token = predicted MoE expert time per decode token (hits' GPU compute free); belady = fill's lower "
        "bound; hyb_miss = hybrid's miss rate, hyb_cpu = share of its misses run on the host; auto = the engine's choice from B_P, B_H and the miss rate"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--trace",
        help="routing trace (ft generate --record-routing, or a recorded one of a trained model: "
        "see bench_cache_policies.py); default: a synthetic Zipf trace",
    )
    ap.add_argument(
        "--domain", default=None, help="a part of a recorded trace (general, code, a dataset name)"
    )
    ap.add_argument(
        "--victims",
        choices=["lru", "reuse", "nextuse"],
        default="lru",
        help="the cache's victim policy for fill and hybrid (ExpertCache's; default lru)",
    )
    ap.add_argument(
        "--fraction", type=float, default=0.5, help="cache size as a fraction of L*E (default 0.5)"
    )
    ap.add_argument(
        "--expert-mb",
        type=float,
        default=QWEN3_30B_EXPERT_BYTES / 1e6,
        help="bytes per expert in MB (1e6)",
    )
    ap.add_argument(
        "--bh", type=float, help="this machine's host expert-kernel bandwidth, GB/s (adds a row)"
    )
    ap.add_argument(
        "--bp", type=float, help="this machine's PCIe bandwidth, GB/s (only with a GPU)"
    )
    ap.add_argument(
        "--prefill",
        choices=["warm", "skip"],
        default="warm",
        help="prefill steps warm the caches or are skipped",
    )
    ap.add_argument("--static-from", choices=["trace", "prefill", "decode"], default="trace")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic trace")
    ap.add_argument("--json", metavar="FILE", help="write the same figures as JSON")
    a = ap.parse_args()
    if a.bp is not None and a.bh is None:
        ap.error("--bp needs --bh")
    trace = sim.load_trace(a.trace, a.domain) if a.trace else sim.synthetic_trace(seed=a.seed)
    if not a.trace:
        print("no --trace given: using a SYNTHETIC trace")
    machines = MACHINES + ([("this machine", a.bp, a.bh)] if a.bh else [])
    out = predict(
        trace,
        sim.slots_for(trace, a.fraction),
        a.expert_mb * 1e6,
        machines,
        a.prefill,
        a.static_from,
        a.victims,
    )
    out["synthetic"] = not a.trace
    print_table(out)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
