"""Mixed steps: every step runs all running decodes plus prompt chunks in the budget left, in one forward."""

import json

import torch

from ft_core import Engine, SamplingParams

IDS = [(i * 37 + 11) % 700 + 20 for i in range(400)]


def test_long_prompt_does_not_stall_decoding_streams(demo_dir, tmp_path):
    trace = tmp_path / "routing.jsonl"
    eng = Engine.from_pretrained(demo_dir, max_batch_tokens=32, record_routing=str(trace))
    p = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    a, b = eng.add_request(IDS[:7], p), eng.add_request(IDS[50:61], p)
    eng.step()  # both prompts
    assert eng.scheduler.running == [a, b]
    long = eng.add_request(
        IDS[100:400], SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
    )
    prefill_steps = 0
    while not long.finished:
        live = [s for s in (a, b) if not s.finished]
        before = [len(s.output_ids) for s in live]
        prefilling = long.num_computed < len(long.prompt_ids)
        out = eng.step()
        assert out[: len(live)] == live and out[len(live) :] == [long]
        assert [len(s.output_ids) for s in live] == [
            n + 1 for n in before
        ]  # every stream got its token
        prefill_steps += prefilling and len(live) == 2
    assert prefill_steps == 10  # 300 prompt tokens in chunks of 30 beside the two decodes
    while not (a.finished and b.finished):
        eng.step()
    alone = Engine.from_pretrained(demo_dir, prefix_cache=False)
    for s in (a, b, long):
        assert s.output_ids == alone.generate(s.prompt_ids, s.params)[0].token_ids
    recs = [json.loads(line) for line in trace.read_text().splitlines()]
    phases = [(r["phase"], r["seq_tokens"]) for r in recs]
    assert phases[0] == ("prefill", [7, 11])
    assert (
        phases[1:11] == [("prefill", [1, 1, 30])] * 10
    )  # decodes and a prompt chunk in one forward
    assert phases[-1] == ("decode", [1] * len(phases[-1][1]))


def test_step_returns_the_decoding_sequences_every_step(demo_dir):
    eng = Engine.from_pretrained(demo_dir, max_batch_tokens=16)
    p = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    a, b = eng.add_request(IDS[:5], p), eng.add_request(IDS[20:29], p)
    assert eng.step() == [a, b]
    c = eng.add_request(IDS[200:300], p)
    for _ in range(8):  # c's 100-token prompt takes 8 steps of 14 tokens
        out = eng.step()
        assert out[:2] == [a, b] and out[2:] == [c]
    assert eng.step() == [a, b, c] and eng.scheduler.running == [a, b, c]


def test_decodes_are_never_cut_by_the_budget(demo_dir):
    """As many running sequences as max_batch_tokens: all of them still decode every step; a new prompt
    waits for budget."""
    eng = Engine.from_pretrained(demo_dir, max_batch_tokens=3)
    p = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    seqs = [eng.add_request([IDS[i]], p) for i in range(3)]
    assert eng.step() == seqs and eng.scheduler.running == seqs
    late = eng.add_request(IDS[10:14], p)
    while not all(s.finished for s in seqs):
        assert eng.step() == seqs
    while not late.finished:
        assert eng.step() == [late]
    alone = Engine.from_pretrained(demo_dir)
    seqs.append(late)
    assert [s.output_ids for s in seqs] == [
        o.token_ids for o in alone.generate([s.prompt_ids for s in seqs], p)
    ]


def test_preemption_with_shared_pages(demo_dir):
    """A pool too small for four requests sharing a system prompt: sequences are preempted while pages
    are shared, recomputed mostly from the prefix cache; outputs equal a large pool without the cache."""
    big = Engine.from_pretrained(demo_dir, page_size=4, prefix_cache=False)
    per_page = 4 * big.model.kv_bytes_per_token(torch.float32)
    small = Engine.from_pretrained(
        demo_dir, page_size=4, kv_cache_bytes=20 * per_page, max_batch_tokens=8
    )
    p = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    prompts = [IDS[:24] + [5 + k, 9, 11 + k] for k in range(4)]
    want = [o.token_ids for o in big.generate(prompts, p)]
    seqs = [small.add_request(x, p) for x in prompts]
    while not all(s.finished for s in seqs):
        small.step()
    assert [s.output_ids for s in seqs] == want
    assert sum(s.preemptions for s in seqs) > 0
    assert small.prefix_stats()["hit_tokens"] > 0
    assert (
        not small.kv.tables and small.kv.free_pages + small.prefix.num_pages == small.kv.num_pages
    )
