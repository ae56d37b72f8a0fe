"""Prefix reuse on a hybrid model (Gated DeltaNet + attention): resume only at state checkpoints
(cache/state_cache.py, scheduler_state.py), anchors from the tokenizer (cache/anchors.py).

Resumed outputs equal outputs computed from scratch (sampled logits within rounding, same greedy
tokens); the deepest valid checkpoint is restored, also between page ends; the checkpoint budget is
kept with LRU eviction; live state slots bound concurrency and survive preemption and abort."""

import pytest
import torch
from ft_core import Engine, SamplingParams
from ft_core.cache.anchors import AnchorTokens, CheckpointPolicy

import tiny_checkpoints

import engine_spy
from engine_spy import sampled_logits
from bounds import assert_logits_close

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
S = 4  # page size: checkpoints fall inside pages as often as at their ends
SYSTEM = {"role": "system", "content": "You are a coding agent. Answer briefly and use the tools."}
TOOL_TURN = [
    {"role": "user", "content": "What is in main.py?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "I should read the file first, then the tests, then find the failing function.",
        "tool_calls": [{"function": {"name": "read", "arguments": {"path": "main.py"}}}],
    },
    {"role": "tool", "content": "def main():\n    print('hello world')\n"},
]


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return tiny_checkpoints.make_checkpoint(
        "qwen3_next", tmp_path_factory.mktemp("q3n") / "qwen3_next"
    )


def chat(eng, messages) -> list[int]:
    return eng.tokenizer.encode(eng.tokenizer.apply_chat_template(messages))


def run(eng, ids, params=GREEDY):
    return engine_spy.run(eng, ids, params)


def assert_same(on, off, a, b, rows_on, rows_off):
    assert a.output_ids == b.output_ids
    assert_logits_close(
        torch.stack(rows_on[a.seq_id]),
        torch.stack(rows_off[b.seq_id]),
        on.model_config,
        a.total_len,
    )


def assert_pool_consistent(eng):
    """Nothing runs: every KV page is free, in the tree, or the tail page of a checkpoint."""
    assert not eng.kv.tables and eng.live_states.free_slots == eng.live_states.num_slots
    tails = [c.page for c in eng.checkpoints.all if c.page is not None]
    held = sum(1 for p in range(eng.kv.num_pages) if eng.kv.refs[p])
    assert eng.kv.free_pages + held == eng.kv.num_pages
    assert sum(eng.kv.refs) == eng.prefix.num_pages + len(tails)
    assert eng.checkpoints.count + eng.checkpoints.pool.free_slots == eng.checkpoints.pool.num_slots


def test_anchor_tokens_from_tokenizer_and_template(hybrid):
    eng = Engine.from_pretrained(hybrid)
    tok = eng.tokenizer
    a = AnchorTokens.from_tokenizer(tok)
    names = lambda ids: {tok.id_to_token(i) for i in ids}  # noqa: E731
    assert names(a.after) == {
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
        "<|im_end|>",
        "<|endoftext|>",
    }
    assert names(a.before) == {"<|im_start|>", "<think>"}
    assert [tok.id_to_token(i) for i in a.user_header] == ["<|im_start|>", "user"]
    ids = chat(eng, [SYSTEM, *TOOL_TURN])
    text = lambda p: tok.decode(ids[:p], skip_special_tokens=False)  # noqa: E731
    pts = CheckpointPolicy("anchors", a, interval=10_000, per_prompt=100).prompt_points(ids, 0)
    ends = [text(p) for p in pts]
    want = [
        "tools.<|im_end|>\n",  # before every turn start
        "main.py?<|im_end|>\n<|im_start|>assistant\n",  # before <think> (the header: < 8 ids before)
        "function.\n</think>\n\n<tool_call>\n",  # </think> and the tool call open (< 8 ids apart)
        "<|im_start|>user\n<tool_response>\n",  # right before the tool output
        "</tool_response><|im_end|>\n<|im_start|>assistant\n",
    ]  # the prompt end
    assert (
        len(ends) == len(want)
        and all(e.endswith(w) for e, w in zip(ends, want))
        and pts[-1] == len(ids)
    )
    assert (
        CheckpointPolicy("anchors", a, interval=10_000).prompt_points(ids, 0) == pts[-2:]
    )  # the latest two
    fallback = [
        f for lo, hi in zip([0] + pts, pts) for f in range(lo + 16, hi, 16)
    ]  # every 16 in long blocks
    assert CheckpointPolicy("anchors", a, interval=16, per_prompt=100).prompt_points(ids, 100) == [
        p for p in sorted(pts + fallback) if p > 100
    ]
    llama = CheckpointPolicy("llama", a, per_prompt=100).prompt_points(ids, 0)
    assert [text(p)[-1:] for p in llama[:-1]] == ["\n", "\n"] and ids[llama[0]] == a.user_header[0]
    every = CheckpointPolicy("every_n", a, interval=16, per_prompt=3).prompt_points(ids, 20)
    assert every == [p for p in range(16, len(ids) + 1, 16) if p > 20][-3:]
    assert CheckpointPolicy("none", a).prompt_points(ids, 0) == []


def test_hybrid_resumes_only_at_checkpoints(hybrid):
    """Without checkpoints a hybrid model reuses nothing (KV pages alone would skip recurrent state);
    with them, a second request sharing a prefix resumes at the deepest anchor of that prefix."""
    none = Engine.from_pretrained(hybrid, page_size=S, checkpoint_policy="none")
    on = Engine.from_pretrained(hybrid, page_size=S)
    off = Engine.from_pretrained(hybrid, page_size=S, prefix_cache=False)
    rows_on, rows_off = sampled_logits(on), sampled_logits(off)
    first = chat(on, [SYSTEM, TOOL_TURN[0]])
    second = chat(on, [SYSTEM, {"role": "user", "content": "And what is in util.py?"}])
    for eng in (none, on, off):
        run(eng, first)
    assert none.prefix is None and run(none, second).cached_tokens == 0
    a, b = run(on, second), run(off, second)
    assert_same(on, off, a, b, rows_on, rows_off)
    im_start = on.tokenizer.token_to_id("<|im_start|>")
    system_end = [i for i, t in enumerate(second) if t == im_start][1]  # the user turn's start
    assert a.cached_tokens == system_end and system_end % S != 0  # resumed inside a page
    st = on.prefix_stats()
    assert st["checkpoint_hits"] == 1 and st["checkpoint_hit_tokens"] == system_end
    assert st["prefill_tokens"] == len(first) + len(second) - system_end
    assert_pool_consistent(on)


def test_second_turn_reprefills_only_its_suffix(hybrid):
    """A tool loop: turn 2 = turn 1's prompt + the answer the model gave + the tool output. It restores
    the final state of turn 1 and prefills only what follows; logits and tokens equal from scratch."""
    on = Engine.from_pretrained(hybrid, page_size=S)
    off = Engine.from_pretrained(hybrid, page_size=S, prefix_cache=False)
    rows_on, rows_off = sampled_logits(on), sampled_logits(off)
    p1 = chat(on, [SYSTEM, *TOOL_TURN])
    a1, b1 = run(on, p1), run(off, p1)
    assert_same(on, off, a1, b1, rows_on, rows_off)
    p2 = p1 + a1.output_ids + chat(on, [{"role": "user", "content": "Thanks."}])
    a2, b2 = run(on, p2), run(off, p2)
    assert_same(on, off, a2, b2, rows_on, rows_off)
    assert a2.cached_tokens == len(p1) + len(a1.output_ids) - 1  # all turn 1 computed
    assert on.prefix_stats()["prefill_tokens"] == len(p1) + len(p2) - a2.cached_tokens
    assert_pool_consistent(on)


def test_deepest_valid_checkpoint_is_restored(hybrid):
    """An edit in the middle (an old tool output replaced) resumes at the last anchor before it."""
    on = Engine.from_pretrained(hybrid, page_size=S, checkpoints_per_prompt=100)
    off = Engine.from_pretrained(hybrid, page_size=S, prefix_cache=False)
    rows_on, rows_off = sampled_logits(on), sampled_logits(off)
    msgs = [SYSTEM, *TOOL_TURN, {"role": "user", "content": "Good. Run the tests now."}]
    run(on, chat(on, msgs))
    edited = [*msgs[:3], {"role": "tool", "content": "[Old tool result content cleared]"}, msgs[4]]
    ids = chat(on, edited)
    full = chat(on, msgs)
    lcp = next(i for i, (x, y) in enumerate(zip(full, ids)) if x != y)
    a, b = run(on, ids), run(off, ids)
    assert_same(on, off, a, b, rows_on, rows_off)
    tok = on.tokenizer
    assert tok.decode(ids[: a.cached_tokens], skip_special_tokens=False).endswith(
        "<tool_response>\n"
    )
    assert a.cached_tokens == lcp  # the anchor sits exactly at the first changed token
    assert_pool_consistent(on)


def test_checkpoint_budget_is_lru(hybrid):
    """Two slots: a new checkpoint evicts the least recently used one (GreedyDual: last use + tokens saved
    over the next shallower checkpoint), where a request uses every checkpoint that is a prefix of it and
    stamps those it makes. An evicted checkpoint takes the KV pages that only it needed with it."""
    eng = Engine.from_pretrained(hybrid, page_size=S, state_checkpoints=2, checkpoints_per_prompt=1)
    one = SamplingParams(max_tokens=1)
    p = [chat(eng, [{"role": "user", "content": f"Task number {k}: say {k}."}]) for k in range(3)]
    has = lambda ids: eng.checkpoints.exists(ids, len(ids))  # noqa: E731
    run(eng, p[0], one)
    run(eng, p[1], one)
    assert has(p[0]) and has(p[1]) and eng.checkpoints.count == 2
    assert run(eng, p[0] + [11, 12, 13], one).cached_tokens == len(p[0])  # uses p0's, adds its own
    assert (
        has(p[0]) and not has(p[1]) and has(p[0] + [11, 12, 13])
    )  # p1's was the least recently used
    run(eng, p[2], one)  # p0's and p0+[11..13]'s share a stamp: the latter saves 3 tokens over p0's
    assert has(p[0]) and not has(p[0] + [11, 12, 13]) and has(p[2])
    st = eng.prefix_stats()
    assert st["checkpoints"] == 2 and st["checkpoints_evicted"] == 2 and st["checkpoint_slots"] == 2
    shared = next(i for i, (x, y) in enumerate(zip(p[0], p[1])) if x != y) // S * S
    assert (
        eng.prefix.match(p[1])[1] == shared < len(p[1]) // S * S
    )  # p1's own pages went with its checkpoint
    assert run(eng, p[1] + [5], one).cached_tokens == 0
    assert_pool_consistent(eng)


def test_decode_checkpoints_and_interval_policy(hybrid):
    """every_n: snapshots every 8 tokens in prefill and decode; a continuation resumes at the last one
    inside the previous answer and equals from scratch."""
    on = Engine.from_pretrained(
        hybrid,
        page_size=S,
        checkpoint_policy="every_n",
        checkpoint_interval=8,
        checkpoints_per_prompt=100,
    )
    off = Engine.from_pretrained(hybrid, page_size=S, prefix_cache=False)
    rows_on, rows_off = sampled_logits(on), sampled_logits(off)
    p = chat(on, [SYSTEM, TOOL_TURN[0]])
    long = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    a = run(on, p, long)
    nxt = p + a.output_ids[:15] + [7, 8, 9]
    x, y = run(on, nxt), run(off, nxt)
    assert_same(on, off, x, y, rows_on, rows_off)
    assert x.cached_tokens == (len(p) + 15) // 8 * 8 > len(p)  # a decode-time checkpoint
    assert_pool_consistent(on)


def test_state_slots_preemption_and_abort(hybrid):
    """Two live state slots for five requests and a KV pool that forces preemption: every output equals
    an unconstrained engine's; abort frees the slot at once."""
    big = Engine.from_pretrained(hybrid, page_size=S, prefix_cache=False)
    per_page = S * big.model.kv_bytes_per_token(torch.float32)
    small = Engine.from_pretrained(hybrid, page_size=S, state_slots=2, kv_cache_bytes=24 * per_page)
    p = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    prompts = [
        chat(big, [{"role": "user", "content": f"Request {k} " * (1 + k % 3)}]) for k in range(5)
    ]
    want = [o.token_ids for o in big.generate(prompts, p)]
    assert [o.token_ids for o in small.generate(prompts, p)] == want
    assert small.live_states.free_slots == 2
    s = small.add_request(prompts[0], p)
    small.step()
    assert small.live_states.free_slots == 1
    small.abort(s)
    assert small.live_states.free_slots == 2 and s.state_slot is None
    assert_pool_consistent(small)


def test_resize_state_budget_keeps_what_fits(hybrid):
    """The MemoryManager's "states" pool is the checkpoint budget: shrinking keeps the most valuable
    checkpoints that fit (copied into the new pool), and resumed output still equals from scratch."""
    eng = Engine.from_pretrained(hybrid, page_size=S, state_checkpoints=8)
    off = Engine.from_pretrained(hybrid, page_size=S, prefix_cache=False)
    rows_on, rows_off = sampled_logits(eng), sampled_logits(off)
    p = chat(eng, [SYSTEM, *TOOL_TURN])
    a1 = run(eng, p)
    per = eng.state_layout.bytes_per_slot
    assert eng.memory.split()["states"] == 8 * per and eng.checkpoints.count >= 3
    rec = eng.resize(states=2 * per + per // 2)
    assert eng.memory.split()["state_slots"] == 2 and eng.checkpoints.count == 2
    assert rec["states"]["slots_after"] == 2 and rec["states"]["evicted"] >= 1
    nxt = p + a1.output_ids + chat(eng, [{"role": "user", "content": "Thanks."}])
    a, b = run(eng, nxt), run(off, nxt)
    assert_same(eng, off, a, b, rows_on, rows_off)
    assert a.cached_tokens == len(
        p
    )  # kept: the prompt end (the final state saved only 7 tokens more)
    eng.resize(states=6 * per)
    assert eng.checkpoints.pool.num_slots == 6 and eng.checkpoints.count >= 2
    assert_pool_consistent(eng)


def test_kv_resize_keeps_checkpoint_tails(hybrid):
    """Compacting the KV pool (elastic memory) renumbers pages: checkpoints between page ends still
    restore their tail tokens' KV and the resumed output equals from scratch."""
    eng = Engine.from_pretrained(hybrid, page_size=7)
    off = Engine.from_pretrained(hybrid, page_size=7, prefix_cache=False)
    rows_on, rows_off = sampled_logits(eng), sampled_logits(off)
    first = chat(
        eng, [{"role": "user", "content": "A first, unrelated request to fill some pages."}]
    )
    first = run(eng, first).all_ids
    p = chat(eng, [SYSTEM, *TOOL_TURN])
    a1 = run(eng, p)
    ids_of = lambda c: [t for n in c.node.path() for t in n.key] + list(c.tail)  # noqa: E731
    for c in [c for c in eng.checkpoints.all if first[: c.pos] == ids_of(c)]:
        eng.checkpoints.drop(
            c
        )  # the first request's pages go back: the later ones move down when compacted
    before = {c: c.page for c in eng.checkpoints.all if c.page is not None}
    eng.resize(kv=eng.memory.split()["kv"] // 2)
    assert any(c.page != page for c, page in before.items())  # renumbered
    nxt = p + a1.output_ids + chat(eng, [{"role": "user", "content": "Thanks."}])
    a, b = run(eng, nxt), run(off, nxt)
    assert_same(eng, off, a, b, rows_on, rows_off)
    assert (
        a.cached_tokens > len(p) and a.cached_tokens % 7 != 0
    )  # a tail restored from a renumbered page
    assert_pool_consistent(eng)


def test_dropped_reasoning_resumes_right_before_think(tmp_path):
    """Qwen3.5's generation prompt opens thinking ("assistant\\n<think>\\n"). The next turn renders that
    answer without its reasoning, so it parts from turn 1's prompt right before <think>: the checkpoint
    kept there (next to the prompt end) is restored and only what follows is prefilled."""
    path = tiny_checkpoints.make_checkpoint("qwen3_5_moe", tmp_path / "qwen3_5_moe")
    on = Engine.from_pretrained(path, page_size=S)
    off = Engine.from_pretrained(path, page_size=S, prefix_cache=False)
    rows_on, rows_off = sampled_logits(on), sampled_logits(off)
    user = {"role": "user", "content": "What is in main.py?"}
    first = chat(on, [SYSTEM, user])
    think = on.tokenizer.token_to_id("<think>")
    assert first[-2] == think  # the generation prompt opened the block
    run(on, first), run(off, first)
    turn2 = chat(
        on,
        [
            SYSTEM,
            user,
            {
                "role": "assistant",
                "content": "It prints hello.",
                "reasoning_content": "Read the file.",
            },
            {"role": "user", "content": "And util.py?"},
        ],
    )
    assert (
        turn2[: len(first) - 2] == first[:-2] and turn2[len(first) - 2] != think
    )  # reasoning dropped
    a, b = run(on, turn2), run(off, turn2)
    assert_same(on, off, a, b, rows_on, rows_off)
    assert a.cached_tokens == len(first) - 2
