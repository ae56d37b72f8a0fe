"""Prefix reuse of KV pages (cache/radix.py + the scheduler): same logits and tokens as without it,
page-aligned hits, shared pages with reference counts, LRU eviction from a small pool, abort."""

import pytest
import torch

from ft_core import Engine, SamplingParams
from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.cache.radix import RadixCache

import tiny_checkpoints

import engine_spy
from engine_spy import sampled_logits
from bounds import assert_logits_close

IDS = [(i * 37 + 11) % 700 + 20 for i in range(64)]  # inside every tiny vocabulary (>= 800)
GREEDY = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
S = 4  # page size of these tests: many pages from short prompts


@pytest.fixture(scope="module")
def ckpt(demo_dir, tmp_path_factory):
    made = {}

    def get(arch):
        if arch == "demo":
            return demo_dir
        if arch not in made:
            made[arch] = tiny_checkpoints.make_checkpoint(
                arch, tmp_path_factory.mktemp(arch) / arch
            )
        return made[arch]

    return get


def run(eng, ids, params=GREEDY):
    return engine_spy.run(eng, ids, params)


def assert_pool_consistent(eng):
    """Nothing runs: every page is either free or held by the prefix cache alone."""
    assert not eng.kv.tables
    assert eng.kv.free_pages + eng.prefix.num_pages == eng.kv.num_pages
    held = [p for p in range(eng.kv.num_pages) if eng.kv.refs[p]]
    assert len(held) == eng.prefix.num_pages and all(eng.kv.refs[p] == 1 for p in held)


def test_radix_tree_match_insert_lock_evict():
    kv = PagedKVCache([KVLayout(8, 2, 1, 1, 1, torch.float32)])
    tree = RadixCache(kv)
    assert kv.reclaim == tree.evict and tree.match([1, 2, 3]) == ([], 0)
    kv.reserve(0, 5)  # pages for [1 2][3 4][5]
    a = list(kv.tables[0])
    node = tree.insert([1, 2, 3, 4, 5], a)  # whole pages only
    assert (
        tree.num_pages == 2
        and tree.pages(node) == a[:2]
        and node.depth == 2
        and node.payload is None
    )
    assert [kv.refs[p] for p in a] == [2, 2, 1]
    assert tree.match([1, 2, 3, 4, 9]) == (a[:2], 4) and tree.match([1, 2, 3, 9]) == (a[:1], 2)
    assert tree.match_node([1, 2, 3, 4], max_pages=1).page == a[0]
    kv.reserve(1, 4)  # another sequence computed [1 2][7 8] on its own pages
    b = list(kv.tables[1])
    other = tree.insert([1, 2, 7, 8], b)
    assert tree.num_pages == 3 and tree.pages(other) == [a[0], b[1]]  # [1 2] is not duplicated
    kv.share(1, tree.pages(other))
    assert kv.tables[1] == [a[0], b[1]] and kv.refs[b[0]] == 0 and kv.free_pages == 8 - 4
    tree.lock(other)
    kv.free(0)
    kv.free(1)
    assert kv.free_pages == 8 - 3  # the tree holds 3 pages
    assert tree.evict(8) == 1 and tree.match([1, 2, 3, 4]) == (
        [a[0]],
        2,
    )  # only the unlocked leaf [3 4]
    assert tree.num_pages == 2 and tree.match([1, 2, 7, 8]) == ([a[0], b[1]], 4)  # locked path kept
    tree.unlock(other)
    assert tree.evict(1) == 1 and tree.num_pages == 1  # the leaf [7 8]
    assert tree.evict(5) == 1 and tree.num_pages == 0 and kv.free_pages == 8 and not tree._evictable
    # LRU: the least recently matched leaf goes first
    kv.reserve(2, 2)
    kv.reserve(3, 2)
    old, new = tree.insert([1, 1], kv.tables[2]), tree.insert([2, 2], kv.tables[3])
    kv.free(2)
    kv.free(3)
    tree.match([1, 1])
    assert tree.evict(1) == 1 and tree.match([2, 2])[1] == 0 and tree.match([1, 1])[1] == 2
    assert old.parent is tree.root and new.parent is None


@pytest.mark.parametrize(
    "arch",
    [
        "demo",
        pytest.param("deepseek_v3", marks=pytest.mark.slow),
        pytest.param("gpt_oss", marks=pytest.mark.slow),
    ],
)
def test_prefix_reuse_keeps_logits_and_tokens(ckpt, arch):
    """A second request sharing a long prefix, then a second chat turn (prompt + answer + more): the same
    sampled logits and greedy tokens as an engine without the prefix cache; hits are whole pages."""
    paged = (
        {"window_state": False} if arch == "gpt_oss" else {}
    )  # windows as paged KV (window state: test_window_state)
    on = Engine.from_pretrained(ckpt(arch), page_size=S, **paged)
    off = Engine.from_pretrained(ckpt(arch), page_size=S, prefix_cache=False, **paged)
    got_rows, want_rows = sampled_logits(on), sampled_logits(off)
    prefix = IDS[:37]
    first = prefix + [5, 6, 7]
    a_on, a_off = run(on, first), run(off, first)
    b_on, b_off = run(on, prefix + [9, 10]), run(off, prefix + [9, 10])
    turn2 = first + a_on.output_ids + [11, 12, 13]
    c_on, c_off = run(on, turn2), run(off, turn2)
    for x, y in [(a_on, a_off), (b_on, b_off), (c_on, c_off)]:
        assert x.output_ids == y.output_ids
        assert_logits_close(
            torch.stack(got_rows[x.seq_id]),
            torch.stack(want_rows[y.seq_id]),
            on.model_config,
            x.total_len,
        )
    assert (
        a_on.cached_tokens == 0 and b_on.cached_tokens == 36
    )  # 9 whole pages of the 37-token prefix
    assert (
        c_on.cached_tokens == (len(first) + len(a_on.output_ids) - 1) // S * S
    )  # turn 1's computed KV
    assert all(s.cached_tokens == 0 for s in (a_off, b_off, c_off))
    st = on.prefix_stats()
    assert st["hit_tokens"] == b_on.cached_tokens + c_on.cached_tokens and st["hit_tokens"] % S == 0
    assert (
        st["queried_tokens"] == len(first) + len(prefix) + 2 + len(turn2) and st["cached_pages"] > 0
    )
    assert off.prefix_stats()["hit_tokens"] == 0 and off.prefix_stats()["cached_pages"] == 0
    assert_pool_consistent(on)


def test_hit_never_covers_the_last_token(ckpt):
    """A prompt that is entirely cached still computes its last page (never writes a shared page)."""
    eng = Engine.from_pretrained(ckpt("demo"), page_size=S)
    ids = IDS[:24]
    first = run(eng, ids)
    again = run(eng, ids)
    assert again.cached_tokens == 20 and again.output_ids == first.output_ids
    one_more = run(
        eng, ids[:21]
    )  # 5 whole pages cached, 21 - 1 = 20 -> 5 pages adopted, one token computed
    assert one_more.cached_tokens == 20
    assert run(eng, IDS[:3]).cached_tokens == 0  # shorter than a page


def test_score_neither_reads_nor_fills_the_prefix_cache(ckpt):
    eng = Engine.from_pretrained(ckpt("demo"), page_size=S)
    ref = eng.score(IDS[:30])
    assert eng.prefix_stats()["cached_pages"] == 0
    run(eng, IDS[:30])
    before = eng.prefix_stats()
    assert_logits_close(eng.score(IDS[:30]), ref, eng.model_config)
    assert eng.prefix_stats() == before


def test_concurrent_requests_share_pages(ckpt):
    """Two requests with one system prompt: arriving in the same step, the second's duplicate pages are
    dropped when its prompt is done; arriving later, it adopts the cached pages. Reference counts add up."""
    eng = Engine.from_pretrained(ckpt("demo"), page_size=S)
    system = IDS[:32]
    a = eng.add_request(system + [5, 6], GREEDY)
    b = eng.add_request(system + [7, 8, 9], GREEDY)
    eng.step()  # both prompts in one forward; both computed the 8 system pages
    ta, tb = eng.kv.tables[a.seq_id], eng.kv.tables[b.seq_id]
    assert ta[:8] == tb[:8]  # b switched to the cached copies
    assert all(eng.kv.refs[p] == 3 for p in ta[:8])  # the tree, a and b
    assert (
        eng.kv.free_pages == eng.kv.num_pages - 8 - 1 - 1
    )  # shared pages once; a and b's own last page
    c = eng.add_request(system + [10], GREEDY)
    eng.step()
    assert c.cached_tokens == 32 and eng.kv.tables[c.seq_id][:8] == ta[:8]
    assert all(eng.kv.refs[p] == 4 for p in ta[:8])
    while not all(s.finished for s in (a, b, c)):
        eng.step()
    assert_pool_consistent(eng)


def test_abort_of_a_sharer_keeps_the_other_unchanged(ckpt):
    eng = Engine.from_pretrained(ckpt("demo"), page_size=S)
    off = Engine.from_pretrained(ckpt("demo"), page_size=S, prefix_cache=False)
    long = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    system = IDS[:40]
    want = run(off, system + [7, 8, 9], long).output_ids
    a = eng.add_request(system + [5, 6], long)
    eng.step()
    b = eng.add_request(system + [7, 8, 9], long)
    for _ in range(4):
        eng.step()
    assert b.cached_tokens == 40 and eng.kv.tables[a.seq_id][:10] == eng.kv.tables[b.seq_id][:10]
    shared, own = eng.kv.tables[a.seq_id][:10], len(eng.kv.tables[a.seq_id]) - 10
    free = eng.kv.free_pages
    eng.abort(a)
    assert a.finish_reason == "abort" and a.seq_id not in eng.kv.tables
    assert (
        eng.kv.free_pages == free + own
    )  # only a's own pages; the shared ones stay with the tree and b
    assert all(eng.kv.refs[p] == 2 for p in shared)
    while not b.finished:
        assert a not in eng.step()
    assert b.output_ids == want
    eng.abort(b)  # finished: a no-op
    assert b.finish_reason == "length"
    assert_pool_consistent(eng)


def test_abort_frees_pages_at_once(ckpt):
    eng = Engine.from_pretrained(ckpt("demo"), page_size=S, prefix_cache=False)
    run_ = eng.add_request(
        IDS[:30], SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True)
    )
    for _ in range(3):
        eng.step()
    free, held = eng.kv.free_pages, len(eng.kv.tables[run_.seq_id])
    eng.abort(run_)
    assert run_.finish_reason == "abort" and eng.kv.free_pages == free + held == free + 8
    assert eng.kv.free_pages == eng.kv.num_pages and not eng.scheduler.running
    waiting = eng.add_request(IDS[:10], GREEDY)  # never scheduled
    eng.abort(waiting)
    assert waiting.finish_reason == "abort" and not eng.scheduler.has_work() and eng.step() == []
    with_cache = Engine.from_pretrained(ckpt("demo"), page_size=S)
    s = with_cache.add_request(
        IDS[:30], SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True)
    )
    for _ in range(3):
        with_cache.step()
    cached = with_cache.prefix.num_pages  # the 7 prompt pages, inserted when the prompt was done
    free, held = with_cache.kv.free_pages, len(with_cache.kv.tables[s.seq_id])
    with_cache.abort(s)
    assert (
        with_cache.kv.free_pages == free + held - 7 and with_cache.prefix.num_pages == cached == 7
    )
    assert_pool_consistent(with_cache)


def test_small_pool_evicts_lru_pages_and_keeps_outputs(ckpt):
    """16 pages of 4 tokens, 8 distinct prompts that each leave 5 pages in the cache: every request
    completes, the oldest prefixes are evicted first, outputs equal an engine without the cache."""
    big = Engine.from_pretrained(ckpt("demo"), page_size=S, prefix_cache=False)
    per_page = S * big.model.kv_bytes_per_token(torch.float32)
    small = Engine.from_pretrained(ckpt("demo"), page_size=S, kv_cache_bytes=16 * per_page)
    assert small.kv.num_pages == 16
    p = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    prompts = [[100 + 50 * k] + IDS[k : k + 17] for k in range(8)]
    want = [o.token_ids for o in big.generate(prompts, p)]
    assert [run(small, x, p).output_ids for x in prompts] == want
    st = small.prefix_stats()
    assert st["evicted_pages"] > 0 and st["cached_pages"] + st["free_pages"] == 16
    assert small.prefix.match(prompts[0])[1] == 0  # least recently used: gone
    assert (
        small.prefix.match(prompts[-1] + want[-1])[1] == 20
    )  # newest: still whole (23 computed tokens)
    assert_pool_consistent(small)
    # all together: preemption, sharing and eviction at once; then repeats that hit the cache
    assert [o.token_ids for o in small.generate(prompts, p)] == want
    assert [o.token_ids for o in small.generate(prompts[::-1], p)] == want[::-1]
    assert small.prefix_stats()["hit_tokens"] > st["hit_tokens"]
    assert_pool_consistent(small)
