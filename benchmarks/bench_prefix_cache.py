"""Re-prefilled tokens of multi-turn agent sessions on a hybrid model, per checkpoint placement policy.

    uv run python benchmarks/bench_prefix_cache.py [--json FILE] [--png FILE] [--sessions 6] [--slots 48]
        [--interval 256] [--per-prompt 2] [--arch qwen3_next|qwen3_5_moe|gpt_oss | --ckpt DIR]

Sessions come from ``benchmarks/agent_traces`` (harness edits: thinking dropped, old tool outputs
cleared, a moving tail message, a per-session billing header, compaction). They run concurrently,
one call per session per round, through a real ``ft_core.Engine`` on a tiny ``qwen3_next`` checkpoint
(Gated DeltaNet + attention; made with transformers unless ``--ckpt``): the prompt is prefilled, the
answer decoded (forced to the trace's tokens by a TokenConstraint). Per call, re-prefilled tokens =
prompt tokens the engine computed (not restored from a checkpoint); the unavoidable minimum = the
tokens after the longest common prefix with any sequence computed in an earlier round (at least 1).

Policies, all with the same checkpoint budget (``--slots``) and at most ``--per-prompt`` snapshots
per prompt: ``anchors`` (ours: block boundaries from the tokenizer/template, prompt ends, decode
anchors, ends of turns), ``every_n`` (vLLM/SGLang style, every ``--interval`` tokens), ``llama``
(llama.cpp style: prompt end and user-message starts), ``none``. On a model with sliding-window
layers kept as state (``--arch gpt_oss``: the window is checkpointed like recurrent state) one more
column, ``paged``, runs the same calls with the windows as paged KV of every token (window_state off):
prefixes then resume at any page, at the cost of KV for every token of every windowed layer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import torch

# transformers' Qwen3-Next / Qwen3.5 modeling imports flash-linear-attention when installed (a dev
# dependency; ~25 s, and its kernels need a GPU): this benchmark only writes tiny checkpoints with it.
sys.modules.setdefault("fla", None)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from agent_traces.generate import make_sessions  # noqa: E402
from bench_cache_policies import Canvas  # noqa: E402
from ft_core import Engine, SamplingParams  # noqa: E402
from ft_core.constraint import TokenConstraint  # noqa: E402

POLICIES = ("anchors", "every_n", "llama", "none")
COLORS = {
    "min": (0, 0, 0),
    "anchors": (214, 39, 40),
    "every_n": (31, 119, 180),
    "llama": (44, 160, 44),
    "none": (170, 170, 170),
    "paged": (148, 103, 189),
}
COLUMNS = (*POLICIES, "paged")


class ForcedTokens(TokenConstraint):
    """Decode exactly ``ids`` (the trace's answer), one allowed token per step."""

    def __init__(self, ids: list[int]):
        self.ids, self.k = ids, 0

    def allowed(self, vocab_size: int) -> torch.Tensor:
        m = torch.zeros(vocab_size, dtype=torch.bool)
        m[self.ids[self.k]] = True
        return m

    def accept(self, token: int) -> None:
        self.k += 1

    def finished(self) -> bool:
        return self.k >= len(self.ids)


def render(tok, session, stop: set[int]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids up to and including the first id that ends generation, ``stop``, or all of
    them: harmony ends a final answer in history with ``<|end|>``) of every call, with the model's own
    chat template."""
    out = []
    for call in session.calls:
        prompt = tok.apply_chat_template(call.messages, tools=session.tools)
        full = tok.apply_chat_template(
            call.messages + [call.response], tools=session.tools, add_generation_prompt=False
        )
        assert full.startswith(prompt), (
            "the template renders the answer after the generation prompt"
        )
        answer = tok.encode(full[len(prompt) :], add_special_tokens=False)
        end = next((i for i, t in enumerate(answer) if t in stop), len(answer) - 1)
        out.append((tok.encode(prompt), answer[: end + 1]))
    return out


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def minimum(rendered: list[list[tuple[list[int], list[int]]]]) -> list[list[int]]:
    """Per session and call: tokens after the longest prefix shared with a sequence of an earlier round."""
    done: list[list[int]] = []
    out = [[] for _ in rendered]
    for r in range(max(len(s) for s in rendered)):
        new = []
        for i, s in enumerate(rendered):
            if r < len(s):
                prompt, answer = s[r]
                shared = max((_lcp(prompt, d) for d in done), default=0)
                out[i].append(max(1, len(prompt) - shared))
                new.append(prompt + answer[:-1])  # the last answer token is sampled, never computed
        done += new
    return out


def replay(ckpt: str, rendered, policy: str, args) -> tuple[list[list[int]], dict]:
    """Run every session's calls round by round; returns re-prefilled tokens per call and prefix_stats."""
    paged = (
        {"window_state": False, "checkpoint_policy": "none"}
        if policy == "paged"
        else {"checkpoint_policy": policy}
    )
    eng = Engine.from_pretrained(
        ckpt,
        page_size=args.page_size,
        state_checkpoints=args.slots,
        **paged,
        checkpoint_interval=args.interval,
        checkpoints_per_prompt=args.per_prompt,
        max_batch_tokens=1 << 16,
        state_slots=max(16, len(rendered)),
        max_model_len=args.max_model_len,
    )
    out = [[] for _ in rendered]
    for r in range(max(len(s) for s in rendered)):
        seqs = {}
        for i, s in enumerate(rendered):
            if r < len(s):
                prompt, answer = s[r]
                p = SamplingParams(max_tokens=len(answer), temperature=0.0)
                seqs[i] = eng.add_request(prompt, p, constraint=ForcedTokens(answer))
        while not all(q.finished for q in seqs.values()):
            eng.step()
        for i, q in seqs.items():
            assert q.output_ids == rendered[i][r][1] and q.preemptions == 0
            out[i].append(len(q.prompt_ids) - q.cached_tokens)
    return out, eng.prefix_stats()


def run(args) -> dict:
    torch.set_num_threads(1)  # a tiny model: threads only add synchronisation
    ckpt, args.max_model_len = args.ckpt, None
    if ckpt is None:
        import tiny_checkpoints

        ckpt = str(
            tiny_checkpoints.make_checkpoint(args.arch, os.path.join(tempfile.mkdtemp(), args.arch))
        )
        # A random tiny model has no trained context to respect; the traces need ~8k tokens.
        os.environ["FT_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
        args.max_model_len = 1 << 14
    sessions = make_sessions(args.sessions, args.seed, args.tasks)
    eng = Engine.from_pretrained(ckpt, prefix_cache=False)
    rendered = [render(eng.tokenizer, s, eng.eos_ids) for s in sessions]
    cfg = eng.model_config
    if cfg.state_layers() != cfg.state_layers(False) and "paged" not in args.policies:
        args.policies.append("paged")  # windows kept as state: also run them as paged KV
    res = {"min": minimum(rendered)}
    stats, secs = {}, {}
    for pol in args.policies:
        t = time.time()
        res[pol], stats[pol] = replay(ckpt, rendered, pol, args)
        secs[pol] = round(time.time() - t, 1)
    turns = []
    for i, s in enumerate(sessions):
        for k in range(len(rendered[i])):
            turns.append(
                {
                    "session": i,
                    "harness": s.harness,
                    "call": k,
                    "prompt": len(rendered[i][k][0]),
                    "answer": len(rendered[i][k][1]),
                    **{c: res[c][i][k] for c in res},
                }
            )
    totals = {c: sum(t[c] for t in turns) for c in res}
    by_harness = {
        h: {c: sum(t[c] for t in turns if t["harness"] == h) for c in res}
        for h in dict.fromkeys(s.harness for s in sessions)
    }
    return {
        "checkpoint": ckpt,
        "sessions": args.sessions,
        "calls": len(turns),
        "slots": args.slots,
        "per_prompt": args.per_prompt,
        "interval": args.interval,
        "page_size": args.page_size,
        "prompt_tokens": sum(t["prompt"] for t in turns),
        "totals": totals,
        "by_harness": by_harness,
        "over_min": {p: round(totals[p] / totals["min"], 4) for p in args.policies},
        "seconds": secs,
        "stats": stats,
        "turns": turns,
    }


def print_table(out: dict) -> None:
    cols = ["min", *[p for p in COLUMNS if p in out["totals"]]]
    print(
        f"{out['sessions']} sessions, {out['calls']} calls, {out['prompt_tokens']} prompt tokens; "
        f"checkpoint budget {out['slots']} slots, <= {out['per_prompt']} per prompt, N = {out['interval']}"
    )
    print(
        f"{'sess':>4} {'harness':>12} {'call':>4} {'prompt':>6} "
        + " ".join(f"{c:>8}" for c in cols)
    )
    for t in out["turns"]:
        print(
            f"{t['session']:>4} {t['harness']:>12} {t['call']:>4} {t['prompt']:>6} "
            + " ".join(f"{t[c]:>8}" for c in cols)
        )
    for h, v in out["by_harness"].items():
        print(f"{'':>4} {h:>12} {'all':>4} {'':>6} " + " ".join(f"{v[c]:>8}" for c in cols))
    print(
        f"{'':>4} {'TOTAL':>12} {'':>4} {out['prompt_tokens']:>6} "
        + " ".join(f"{out['totals'][c]:>8}" for c in cols)
    )
    print(
        f"{'':>4} {'/ min':>12} {'':>4} {'':>6} {'1.000':>8} "
        + " ".join(f"{out['over_min'][c]:>8.3f}" for c in cols[1:])
    )
    print(
        "re-prefilled tokens per call (min = tokens after the first changed position); seconds per policy:",
        out["seconds"],
    )


def plot(out: dict, path: str) -> None:
    """Per-call grouped bars (min, then each policy), log-free linear scale."""
    cols = ["min", *[p for p in COLUMNS if p in out["totals"]]]
    turns = out["turns"]
    bw, gap, L, T, B = 3, 4, 70, 40, 50
    W = L + len(turns) * (len(cols) * bw + gap) + 170
    H = 420
    cv = Canvas(W, H)
    ymax = max(t[c] for t in turns for c in cols)
    Y = lambda v: round(H - B - v / ymax * (H - T - B))  # noqa: E731
    for k in range(6):
        v = ymax * k / 5
        cv.line(L, Y(v), W - 170, Y(v), (225, 225, 225))
        cv.text(4, Y(v) - 5, f"{v:.0f}")
    cv.text(L, 12, "RE-PREFILLED TOKENS PER CALL")
    x = L
    for t in turns:
        for c in cols:
            for dx in range(bw):
                cv.line(x + dx, Y(0), x + dx, Y(t[c]), COLORS[c])
            x += bw
        x += gap
    cv.line(L, Y(0), W - 170, Y(0), (0, 0, 0))
    cv.text(L, H - 30, "CALLS IN SESSION ORDER")
    for j, c in enumerate(cols):
        cv.line(W - 150, T + 12 + 20 * j, W - 126, T + 12 + 20 * j, COLORS[c], r=2)
        cv.text(W - 118, T + 7 + 20 * j, f"{c.replace('_', ' ')} {out['totals'][c]}")
    cv.png(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--tasks", type=int, default=3, help="user tasks per session")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--slots", type=int, default=48, help="checkpoint budget (slots), the same for every policy"
    )
    ap.add_argument("--per-prompt", type=int, default=2, help="snapshots per prompt at most")
    ap.add_argument(
        "--interval", type=int, default=256, help="every_n spacing (and the anchors' fallback)"
    )
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument(
        "--arch",
        default="qwen3_next",
        help="the tiny checkpoint made with transformers (qwen3_next, qwen3_5_moe, gpt_oss)",
    )
    ap.add_argument(
        "--ckpt",
        help="a checkpoint with state layers (linear attention or windows) instead of --arch",
    )
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--png", metavar="FILE")
    a = ap.parse_args()
    a.policies = a.policies.split(",")
    out = run(a)
    print_table(out)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    if a.png:
        plot(out, a.png)
        print(f"plot: {a.png}")


if __name__ == "__main__":
    main()
