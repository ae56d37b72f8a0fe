"""Decode miss rates of expert-cache policies on a recorded routing trace, against Belady's optimum.

    uv run ft generate --max-tokens 64 --record-routing trace.jsonl "some prompt"   # (repeat: appends)
    uv run python benchmarks/bench_cache_policies.py --trace trace.jsonl [--json FILE] [--png FILE]
        [--domain general|code|DATASET]  (--trace also takes ../shared/traces/*.npz and *_routing.jsonl)
        [--fractions 0.05,0.1,0.25,0.5] [--ratio 0.5] [--prefill warm|skip] [--static-from trace|prefill|decode]
        [--prefetch N]

The DECODE layer steps of the trace are replayed through caches of S = fraction * L * E slots
(L MoE layers, E experts each). Prefill steps warm the replayed caches (``--prefill warm``, the
default: they go through the same policy, as in the engine) or are dropped (``skip``); they are
never counted. Miss rate = sum of misses / sum of distinct ids routed, over decode layer steps.

Columns:
  lru_fill         the engine's global LRU (ft_core ExpertCache), every miss filled (q = m)
  reuse_fill       ExpertCache's "reuse" victim policy (expected next use: layer distance + routing rate),
                   every miss filled
  nextuse_fill     ExpertCache's "nextuse" (the engine's default: chance of no use in the layer's next 2-3
                   visits, with its admission: a refused miss runs on the CPU and counts as a miss),
                   every admitted miss filled
  hybrid           the same LRU with q = clamp(round(m * ratio), 1, m) (ft_core's q_policy:
                   rounds half up), ratio = B_P / B_H (--ratio)
  hyb_cpu          fraction of hybrid's misses computed on the CPU (not filled)
  static           KTransformers-like: the S most-routed ids pinned, never changing
  static_layer     llama.cpp-like: each layer gets S/L slots holding its most-routed experts
  belady           Belady's optimum for a global cache that fills every miss (bound for lru_fill)
  reuse_prefetch   (--prefetch N) reuse_fill, and after each decode layer step the N experts expected at the
                   next layer (cache_prefetch.NextLayerGuess: from routing alone) fetched before that layer runs;
                   misses are what the layers still wait for. pf_per_token: experts the prefetches copied per
                   decode token (demand fills: fill_per_token); pf_used: the share of them the next layer routed
The static sets come from route counts over the whole trace by default (an oracle profile: the
best a frozen set can do); ``--static-from prefill`` profiles the prefill forwards only.
The PNG (written without matplotlib) plots miss rate against the fraction for every policy.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cache_prefetch  # noqa: E402
import cache_sim as sim  # noqa: E402  (benchmarks/ is not a package)

POLICIES = ("lru_fill", "reuse_fill", "nextuse_fill", "hybrid", "static", "static_layer", "belady")
COLORS = {
    "lru_fill": (31, 119, 180),
    "reuse_fill": (148, 103, 189),
    "nextuse_fill": (23, 190, 207),
    "hybrid": (255, 127, 14),
    "static": (44, 160, 44),
    "static_layer": (214, 39, 40),
    "belady": (0, 0, 0),
}


def run(trace, fractions, ratio=0.5, prefill="warm", static_from="trace", prefetch=0) -> dict:
    rows = []
    for f in fractions:
        S = sim.slots_for(trace, f)
        fill = sim.replay_lru(trace, S, "fill", prefill=prefill)
        reuse = sim.replay_lru(trace, S, "fill", prefill=prefill, victim="reuse")
        nxt = sim.replay_lru(trace, S, "fill", prefill=prefill, victim="nextuse")
        hyb = sim.replay_lru(trace, S, "hybrid", ratio, prefill=prefill)
        st = sim.replay_static(trace, sim.static_set(trace, S, static_from))
        sl = sim.replay_static(trace, sim.static_set(trace, S, static_from, per_layer=True))
        bel = sim.replay_belady(trace, S, prefill=prefill)
        rows.append(
            {
                "fraction": f,
                "slots": S,
                "lru_fill": fill.miss_rate,
                "reuse_fill": reuse.miss_rate,
                "nextuse_fill": nxt.miss_rate,
                "nextuse_fills_per_token": nxt.fills / max(1, trace.decode_tokens),
                "hybrid": hyb.miss_rate,
                "hyb_cpu": hyb.cpu_fraction,
                "static": st.miss_rate,
                "static_layer": sl.miss_rate,
                "belady": bel.miss_rate,
                "distinct": fill.distinct,
            }
        )
        if prefetch:
            pf = cache_prefetch.replay_prefetch(trace, S, prefetch, "reuse", prefill)
            n = max(1, trace.decode_tokens)
            rows[-1].update(
                reuse_prefetch=pf.miss_rate,
                fill_per_token=pf.fills / n,
                pf_per_token=pf.prefetched / n,
                pf_used=pf.used / max(1, pf.prefetched),
                reuse_fill_per_token=reuse.fills / n,
            )
    return {
        "trace": trace.source,
        "layers": trace.num_layers,
        "experts": trace.num_experts,
        "num_ids": trace.num_ids,
        "decode_layer_steps": sum(s[0] for s in trace.steps),
        "decode_tokens": trace.decode_tokens,
        "prefill": prefill,
        "static_from": static_from,
        "ratio": ratio,
        "prefetch": prefetch,
        "rows": rows,
    }


def print_table(out: dict) -> None:
    print(
        f"trace: {out['trace']}  (L={out['layers']} MoE layers x E={out['experts']} = {out['num_ids']} ids, "
        f"{out['decode_layer_steps']} decode layer steps, {out['decode_tokens']} decode tokens)"
    )
    print(
        f"prefill: {out['prefill']}; static sets from: {out['static_from']}; hybrid ratio B_P/B_H = {out['ratio']}"
    )
    cols = ("fraction", "slots") + POLICIES[:4] + ("hyb_cpu",) + POLICIES[4:]
    print("  ".join(f"{c:>12}" for c in cols))
    for r in out["rows"]:
        print("  ".join(f"{r[c]:>12}" if c == "slots" else f"{r[c]:>12.4f}" for c in cols))
    print(
        "miss rate = misses / distinct ids routed, summed over decode layer steps; hyb_cpu = share of hybrid's misses run on the CPU"
    )
    if out.get("prefetch"):
        pcols = (
            "fraction",
            "reuse_fill",
            "reuse_prefetch",
            "belady",
            "reuse_fill_per_token",
            "fill_per_token",
            "pf_per_token",
            "pf_used",
        )
        print(
            f"prefetch of {out['prefetch']} experts a layer step (experts copied per decode token: reuse alone, then "
            "with prefetch: demand fills + prefetch copies)"
        )
        print("  ".join(f"{c:>12}" for c in pcols))
        for r in out["rows"]:
            print("  ".join(f"{r[c]:>12.4f}" for c in pcols))


# --- a tiny PNG line plot (no matplotlib): a 3x5 bitmap font, lines, zlib + CRC chunks -------------
_GLYPHS = dict(
    zip(
        "0123456789.-_%ABCDEFGHIJKLMNOPQRSTUVWXYZ /",
        (
            "111101101101111 010110010010111 111001111100111 111001111001111 101101111001001 111100111001111 "
            "111100111101111 111001001001001 111101111101111 111101111001111 000000000000010 000000111000000 "
            "000000000000111 101001010100101 010101111101101 110101110101110 011100100100011 110101101101110 "
            "111100110100111 111100110100100 011100101101011 101101111101101 111010010010111 001001001101010 "
            "101101110101101 100100100100111 101111111101101 110101101101101 010101101101010 110101110100100 "
            "010101101110011 110101110101101 011100010001110 111010010010010 101101101101111 101101101101010 "
            "101101111111101 101101010101101 101101010010010 111001010100111 000000000000000 001001010100100"
        ).split(),
    )
)


class Canvas:
    def __init__(self, w: int, h: int):
        self.w, self.h = w, h
        self.px = [bytearray(b"\xff" * (3 * w)) for _ in range(h)]

    def dot(self, x: int, y: int, c, r: int = 0) -> None:
        for yy in range(y - r, y + r + 1):
            for xx in range(x - r, x + r + 1):
                if 0 <= xx < self.w and 0 <= yy < self.h:
                    self.px[yy][3 * xx : 3 * xx + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, r: int = 0) -> None:
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(n + 1):
            self.dot(round(x0 + (x1 - x0) * k / n), round(y0 + (y1 - y0) * k / n), c, r)

    def text(self, x: int, y: int, s: str, c=(0, 0, 0), z: int = 2) -> None:
        for ch in s.upper():
            g = _GLYPHS.get(ch, _GLYPHS[" "])
            for k, bit in enumerate(g):
                if bit == "1":
                    for dy in range(z):
                        for dx in range(z):
                            self.dot(x + (k % 3) * z + dx, y + (k // 3) * z + dy, c)
            x += 4 * z

    def png(self, path: str) -> None:
        raw = b"".join(b"\x00" + bytes(row) for row in self.px)
        chunk = lambda t, d: (
            struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
        )
        with open(path, "wb") as f:
            f.write(
                b"\x89PNG\r\n\x1a\n"
                + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9))
                + chunk(b"IEND", b"")
            )


def plot(out: dict, path: str) -> None:
    W, H, L, R, T, B = 760, 480, 70, 200, 40, 60
    cv = Canvas(W, H)
    rows = out["rows"]
    ymax = max(0.1, max(r[p] for r in rows for p in POLICIES))
    ymax = min(1.0, -(-ymax * 10 // 1) / 10)  # round up to 0.1
    X = lambda f: round(L + f * (W - L - R))
    Y = lambda v: round(H - B - v / ymax * (H - T - B))
    for k in range(6):  # grid and ticks
        fx, vy = k / 5, ymax * k / 5
        cv.line(X(fx), T, X(fx), H - B, (225, 225, 225))
        cv.line(L, Y(vy), W - R, Y(vy), (225, 225, 225))
        cv.text(X(fx) - 12, H - B + 8, f"{fx:.1f}")
        cv.text(L - 44, Y(vy) - 5, f"{vy:.2f}")
    cv.line(L, H - B, W - R, H - B, (0, 0, 0))
    cv.line(L, T, L, H - B, (0, 0, 0))
    cv.text(L, 12, "DECODE MISS RATE VS CACHE FRACTION OF L X E")
    cv.text(X(0.5) - 60, H - 24, "CACHE FRACTION")
    for j, p in enumerate(POLICIES):
        pts = [(X(r["fraction"]), Y(r[p])) for r in rows]
        for a, b in zip(pts, pts[1:]):
            cv.line(*a, *b, COLORS[p], r=1)
        for x, y in pts:
            cv.dot(x, y, COLORS[p], r=3)
        cv.line(W - R + 16, T + 12 + 20 * j, W - R + 40, T + 12 + 20 * j, COLORS[p], r=1)
        cv.text(W - R + 46, T + 7 + 20 * j, p.replace("_", " "))
    cv.png(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--trace",
        required=True,
        help="routing trace: JSON lines from ft generate --record-routing, or a recorded trace of a trained "
        "model (.npz rows per token and layer; a folder or file of per-token-layer JSON lines)",
    )
    ap.add_argument(
        "--domain",
        default=None,
        help="a part of a recorded trace: general or code (npz), a dataset name (JSON lines)",
    )
    ap.add_argument(
        "--fractions",
        default="0.05,0.1,0.15,0.25,0.375,0.5,0.75,1.0",
        help="cache sizes as fractions of L*E",
    )
    ap.add_argument("--ratio", type=float, default=0.5, help="hybrid's B_P / B_H (default 0.5)")
    ap.add_argument(
        "--prefill",
        choices=["warm", "skip"],
        default="warm",
        help="prefill steps warm the caches or are skipped",
    )
    ap.add_argument(
        "--static-from",
        choices=["trace", "prefill", "decode"],
        default="trace",
        help="route counts that pick the static sets",
    )
    ap.add_argument(
        "--prefetch",
        type=int,
        default=0,
        metavar="N",
        help="also replay reuse with a prefetch of the N experts expected at the next layer (0: off)",
    )
    ap.add_argument("--json", metavar="FILE", help="write the same figures as JSON")
    ap.add_argument("--png", metavar="FILE", help="plot miss rate vs fraction per policy")
    a = ap.parse_args()
    out = run(
        sim.load_trace(a.trace, a.domain),
        [float(x) for x in a.fractions.split(",")],
        a.ratio,
        a.prefill,
        a.static_from,
        a.prefetch,
    )
    print_table(out)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    if a.png:
        plot(out, a.png)
        print(f"plot: {a.png}")


if __name__ == "__main__":
    main()
