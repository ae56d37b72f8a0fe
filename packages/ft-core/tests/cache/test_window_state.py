"""Sliding-window layers kept as per-sequence state (GPT-OSS, layers/attn_window.py + the state cache).

The windowed layers hold a ring of the last W keys/values per sequence instead of paged KV: the KV
pool carries only the full-attention layers; logits equal the paged form and transformers for every
chunking (inside a window, across windows, longer than a query block); batched mixed steps equal
single runs; a prefix resumes at a checkpoint of the window (and of nothing else) with the same
logits and tokens as from scratch; anchors come from the harmony tokens."""

import pytest
import torch
from ft_core import Engine, SamplingParams
from ft_core.cache.anchors import AnchorTokens

import tiny_checkpoints

import engine_spy
from bounds import assert_logits_close
from engine_spy import sampled_logits

IDS = [(i * 37 + 11) % 700 + 20 for i in range(600)]  # inside the tiny vocabulary
GREEDY = SamplingParams(
    max_tokens=20, temperature=0.0, ignore_eos=True
)  # more tokens than the window (8)
S = 4


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    return tiny_checkpoints.make_checkpoint(
        "gpt_oss", tmp_path_factory.mktemp("gpt_oss") / "gpt_oss"
    )


def chat(eng, messages) -> list[int]:
    return eng.tokenizer.encode(eng.tokenizer.apply_chat_template(messages))


def test_windows_are_state_and_the_kv_pool_keeps_full_layers_only(gpt_oss):
    on = Engine.from_pretrained(gpt_oss, kv_cache_bytes=1 << 16)
    off = Engine.from_pretrained(gpt_oss, kv_cache_bytes=1 << 16, window_state=False)
    cfg = on.model_config
    windowed = tuple(i for i, w in enumerate(cfg.sliding_windows) if w is not None)
    assert (
        0 < len(windowed) < cfg.num_layers
        and cfg.state_layers() == windowed
        and cfg.state_layers(False) == ()
    )
    assert off.state_layout is None and off.checkpoints is None
    W, K, D = cfg.sliding_windows[windowed[0]], cfg.num_kv_heads, cfg.head_dim
    assert (
        on.state_layout.bytes_per_slot == len(windowed) * 2 * W * K * D * 4
    )  # K and V rings, float32
    per_token = lambda e: e.model.kv_bytes_per_token(torch.float32)  # noqa: E731
    full = cfg.num_layers - len(windowed)
    assert (
        per_token(on) == full * 2 * K * D * 4 and per_token(off) == cfg.num_layers * 2 * K * D * 4
    )
    assert (
        on.kv.num_pages == off.kv.num_pages * cfg.num_layers // full
    )  # the same bytes hold more tokens


@pytest.mark.parametrize(
    "chunk", [3, 8, 300]
)  # inside one window, exactly a window, more than a query block
def test_window_state_logits_equal_paged_and_transformers(gpt_oss, chunk):
    ids = IDS[: 300 if chunk == 300 else 45]
    eng = Engine.from_pretrained(gpt_oss, window_state=False)
    paged, cfg = eng.score(ids), eng.model_config
    got = Engine.from_pretrained(gpt_oss, max_batch_tokens=chunk).score(ids)
    assert_logits_close(got, paged, cfg)
    ref = tiny_checkpoints.load_reference(gpt_oss)
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits[0].float()
    assert_logits_close(got, want, cfg)


def test_mixed_steps_equal_alone_and_paged(gpt_oss):
    """Three prompts of different lengths in small steps: chunks run beside decodes, rings wrap many
    times; the tokens and sampled logits equal each prompt alone and the paged form."""
    prompts = [IDS[:5], IDS[40:70], IDS[100:171]]
    eng = Engine.from_pretrained(gpt_oss, max_batch_tokens=16)
    paged = Engine.from_pretrained(gpt_oss, max_batch_tokens=16, window_state=False)
    rows, rows_paged = sampled_logits(eng), sampled_logits(paged)
    together = eng.generate(prompts, GREEDY)
    ref = paged.generate(prompts, GREEDY)
    alone = [eng.generate(p, GREEDY)[0] for p in prompts]
    assert (
        [o.token_ids for o in together]
        == [o.token_ids for o in ref]
        == [o.token_ids for o in alone]
    )
    for i in range(3):
        n = len(prompts[i]) + GREEDY.max_tokens  # the longest context of the rows
        assert_logits_close(torch.stack(rows[i]), torch.stack(rows_paged[i]), eng.model_config, n)
        assert_logits_close(torch.stack(rows[i]), torch.stack(rows[3 + i]), eng.model_config, n)
    assert eng.live_states.free_slots == eng.live_states.num_slots


def test_harmony_anchors(gpt_oss):
    eng = Engine.from_pretrained(gpt_oss)
    a = AnchorTokens.from_tokenizer(eng.tokenizer)
    names = lambda ids: {eng.tokenizer.id_to_token(i) for i in ids}  # noqa: E731
    assert {"<|end|>", "<|call|>", "<|return|>"} <= names(a.after) and names(a.before) == {
        "<|start|>"
    }


def test_resume_at_a_window_checkpoint_equals_from_scratch(gpt_oss):
    """Turn 2 = turn 1's prompt + the answer + a new user message. It restores the window state at
    the end of turn 1 (inside a page), adopts the full layers' pages up to there, prefills the rest;
    logits and tokens equal an engine without any prefix reuse. A request sharing only the system
    turn resumes at the anchor before the user turn."""
    on = Engine.from_pretrained(gpt_oss, page_size=S)
    off = Engine.from_pretrained(gpt_oss, page_size=S, prefix_cache=False)
    rows_on, rows_off = sampled_logits(on), sampled_logits(off)
    system = {
        "role": "system",
        "content": "You are a coding agent. Answer briefly and use the tools.",
    }
    first = chat(on, [system, {"role": "user", "content": "What is in main.py?"}])
    a, a_off = engine_spy.run(on, first, GREEDY), engine_spy.run(off, first, GREEDY)
    turn2 = first + a.output_ids + chat(on, [{"role": "user", "content": "And in util.py?"}])
    b, b_off = engine_spy.run(on, turn2, GREEDY), engine_spy.run(off, turn2, GREEDY)
    other = chat(on, [system, {"role": "user", "content": "List the tests."}])
    c, c_off = engine_spy.run(on, other, GREEDY), engine_spy.run(off, other, GREEDY)
    for x, y in [(a, a_off), (b, b_off), (c, c_off)]:
        assert x.output_ids == y.output_ids
        assert_logits_close(
            torch.stack(rows_on[x.seq_id]),
            torch.stack(rows_off[y.seq_id]),
            on.model_config,
            x.total_len,
        )
    assert (
        a.cached_tokens == 0 and b.cached_tokens == len(first) + len(a.output_ids) - 1
    )  # the final state
    start = on.tokenizer.token_to_id("<|start|>")
    user_start = [i for i, t in enumerate(other) if t == start][
        -2
    ]  # the user turn (last: the generation prompt)
    assert 0 < c.cached_tokens <= user_start and c.cached_tokens > user_start - 8
    st = on.prefix_stats()
    assert (
        st["checkpoint_hits"] == 2
        and st["checkpoint_hit_tokens"] == b.cached_tokens + c.cached_tokens
    )
    assert (
        st["prefill_tokens"] == len(first) + len(turn2) + len(other) - st["checkpoint_hit_tokens"]
    )
    assert not on.kv.tables and on.live_states.free_slots == on.live_states.num_slots


def test_preemption_state_slots_and_resizes_keep_outputs(gpt_oss):
    """Two live state slots for five requests, a KV pool that forces preemption (the window goes into a
    checkpoint and comes back), and resizes of the KV pool and the checkpoint budget while they run:
    every output equals an unconstrained engine's."""
    big = Engine.from_pretrained(gpt_oss, page_size=S, prefix_cache=False)
    per_page = S * big.model.kv_bytes_per_token(torch.float32)
    small = Engine.from_pretrained(
        gpt_oss, page_size=S, state_slots=2, kv_cache_bytes=16 * per_page
    )
    prompts = [IDS[20 * k : 20 * k + 10 + 7 * k] for k in range(5)]
    want = [o.token_ids for o in big.generate(prompts, GREEDY)]
    seqs = [small.add_request(p, GREEDY) for p in prompts]
    steps = 0
    while not all(s.finished for s in seqs):
        small.step()
        steps += 1
        if steps == 6:
            small.resize(states=3 * small.state_layout.bytes_per_slot)
        if steps == 40:  # after the first preemptions
            small.resize(kv=24 * per_page)
    assert [s.output_ids for s in seqs] == want
    assert sum(s.preemptions for s in seqs) > 0 and small.checkpoints.pool.num_slots == 3
    assert small.live_states.free_slots == 2 and not small.kv.tables


def test_every_layer_windowed_on_request(tmp_path):
    """A model whose every layer is windowed (tiny Mixtral, window 16) keeps paged KV by default;
    window_state=True makes every layer state (pages of 0 bytes): the same logits and tokens."""
    path = tiny_checkpoints.make_checkpoint("mixtral", tmp_path / "mixtral")
    paged = Engine.from_pretrained(path)
    state = Engine.from_pretrained(path, window_state=True, max_batch_tokens=7)
    assert paged.state_layout is None and state.model.kv_bytes_per_token(torch.float32) == 0
    ids = IDS[:100]
    assert_logits_close(state.score(ids), paged.score(ids), paged.model_config)
    assert (
        state.generate(ids[:40], GREEDY)[0].token_ids
        == paged.generate(ids[:40], GREEDY)[0].token_ids
    )
    state.resize(states=4 * state.state_layout.bytes_per_slot)  # no KV bytes to divide
    assert state.memory.split()["state_slots"] == 4 and state.memory.split()["kv"] == 0


def test_default_checkpoint_budget_grows_for_small_slots(gpt_oss):
    """Without a budget, 32 checkpoint slots, or as many small ones as fit in 256 MiB (at most 256):
    GPT-OSS-20B's window checkpoint (~3 MB) gets 85, Qwen3-Next-80B's (74 MiB) 32; a given budget wins."""
    from ft_core.config import EngineConfig

    cfg = EngineConfig(model=str(gpt_oss))
    assert (
        cfg.checkpoint_slots(3 << 20) == 85
        and cfg.checkpoint_slots(74 << 20) == 32
        and cfg.checkpoint_slots(64) == 256
    )
    assert EngineConfig(model="x", state_checkpoints=5).checkpoint_slots(64) == 5
    assert EngineConfig(model="x", state_checkpoint_bytes=640).checkpoint_slots(64) == 10
    assert Engine.from_pretrained(gpt_oss).prefix_stats()["checkpoint_slots"] == 256  # tiny slots
