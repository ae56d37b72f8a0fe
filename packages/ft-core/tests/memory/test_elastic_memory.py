"""Elastic memory: resizes between steps keep outputs, shrinks keep the hottest experts and every held
KV page, impossible shrinks are refused without changes; the automatic policy's hysteresis."""

import pytest

from ft_core import Engine, SamplingParams
from ft_core.memory import ElasticPolicy, ResizeRefused, file_source, parse_bytes

PROMPTS = ["The expert cache keeps", "Elastic memory lets a server", "Pages of keys and values"]
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)


def engine(**kw):
    """The demo model with an expert cache; a context of 128 tokens (8 pages) so that small KV pools
    are still above the minimum (one request of max_model_len)."""
    kw.setdefault("moe_backend", "fill")
    kw.setdefault("moe_cache_slots", 32)
    kw.setdefault("max_model_len", 128)
    return Engine.from_pretrained(None, **kw)


def run(eng, resizes: dict[int, dict]) -> list[list[int]]:
    seqs = [eng.add_request(p, GREEDY) for p in PROMPTS]
    step = 0
    while any(not s.finished for s in seqs):
        if step in resizes:
            eng.resize(**resizes[step])
            eng.memory.history[-1]  # recorded
        eng.step()
        step += 1
    return [list(s.output_ids) for s in seqs]


def test_resizes_during_generation_keep_the_output():
    ref = run(engine(), {})
    eng = engine()
    page = eng.memory.page_bytes
    slot = eng.memory.slot_bytes
    out = run(
        eng,
        {
            3: {"kv": 12 * page, "experts": 4 * slot},  # shrink both while 3 requests decode
            9: {"kv": 200 * page, "experts": 64 * slot},  # grow both
            15: {"total": 60 * page + 8 * slot},
        },
    )  # one total: experts absorb first
    assert out == ref
    hist = eng.memory.history
    assert [h["after"]["kv_pages"] for h in hist[:2]] == [12, 200] and hist[1]["after"][
        "expert_slots"
    ] == 64
    assert hist[0]["experts"]["dropped"] > 0
    split = eng.memory.split()
    assert split["total"] == split["kv"] + split["experts"] + split["states"]


def test_kv_resizes_rebind_the_decode_plans():
    """A bf16 engine on the CPU kernels decodes through its layers' plans (one C++ call a step over pools bound
    once): the pools a resize rebuilds are bound again, so the output is the unresized engine's -- also when
    every other step after a resize runs op by op (on the pools the engine holds: a plan still bound to the
    old pools would have written its tokens' keys there)."""
    kw = dict(moe_backend="cpu", moe_cache_slots=None, dtype="bfloat16")
    ref = run(engine(**kw), {})
    eng = engine(**kw)
    assert all(p is not None for p in eng.model.plans) and eng.model.stacks
    stacks, page = eng.model.stacks, eng.memory.page_bytes
    seqs, step = [eng.add_request(p, GREEDY) for p in PROMPTS], 0
    while any(not s.finished for s in seqs):
        if step in (3, 9):
            eng.resize(kv=(12 if step == 3 else 200) * page)
        eng.model.stacks = {} if step > 3 and step % 2 else stacks  # odd steps op by op
        eng.step()
        step += 1
    assert [list(s.output_ids) for s in seqs] == ref
    assert [h["after"]["kv_pages"] for h in eng.memory.history] == [12, 200]


def test_shrinking_keeps_the_hottest_experts():
    warm, cold = (
        engine(moe_cache_slots=64, prefix_cache=False),
        engine(moe_cache_slots=40, prefix_cache=False),
    )
    warm.generate(PROMPTS[0], GREEDY)
    warm.resize(experts=40 * warm.memory.slot_bytes)
    assert warm.memory.split()["expert_slots"] == 40
    h0 = warm.expert_stats()["total"]["hits"]
    c0 = cold.expert_stats().get("total", {}).get("hits", 0)
    # Decode on from the same context: routing right after the shrink resembles the routing before it.
    p = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    a = warm.generate(PROMPTS[0], p)[0].token_ids
    b = cold.generate(PROMPTS[0], p)[0].token_ids
    assert a == b
    warm_hits = warm.expert_stats()["total"]["hits"] - h0
    cold_hits = cold.expert_stats()["total"]["hits"] - c0
    assert warm_hits > cold_hits, (warm_hits, cold_hits)


def test_refused_shrinks_change_nothing():
    eng = engine(moe_backend="fill")
    seq = eng.add_request(
        "a request that holds pages " * 4, SamplingParams(max_tokens=50, temperature=0.0)
    )
    for _ in range(3):
        eng.step()
    before = eng.memory.split()
    with pytest.raises(ResizeRefused, match="running requests hold"):
        eng.resize(kv=eng.memory.page_bytes)  # one page: the request holds more
    with pytest.raises(ResizeRefused, match="holds no expert slot"):
        eng.resize(experts=10)
    with pytest.raises(ResizeRefused, match="cannot hold"):
        eng.resize(total=before["kv"], kv=before["kv"], experts=before["experts"])
    assert eng.memory.split() == before
    while not seq.finished:
        eng.step()
    plain = Engine.from_pretrained(None)
    with pytest.raises(ResizeRefused, match="no expert cache"):
        plain.resize(experts="1MiB")
    with pytest.raises(ResizeRefused, match="no recurrent-state"):
        plain.resize(states="1MiB")


def test_shrink_evicts_lru_prefix_pages_and_keeps_shared_ones():
    eng = Engine.from_pretrained(None, max_model_len=64)  # 4 pages: the smallest KV pool
    for p in PROMPTS:
        eng.generate(p * 5, SamplingParams(max_tokens=4, temperature=0.0))
    cached = eng.prefix.num_pages
    assert cached > 5
    rec = eng.resize(kv=5 * eng.memory.page_bytes)
    assert (
        eng.prefix.num_pages <= 5
        and eng.kv.num_pages == 5
        and rec["kv"]["evicted"] == cached - eng.prefix.num_pages
    )
    # the most recent prompt's first pages survive and are reused
    seq = eng.add_request(PROMPTS[-1] * 5, SamplingParams(max_tokens=2, temperature=0.0))
    while not seq.finished:
        eng.step()
    assert seq.cached_tokens > 0


def test_parse_bytes():
    assert (
        parse_bytes("512MiB") == 512 << 20
        and parse_bytes("2GB") == 2 * 10**9
        and parse_bytes(4096) == 4096
    )
    assert parse_bytes("1.5g") == 3 << 29
    assert parse_bytes(1.5) == 1 and parse_bytes(float(1 << 40)) == 1 << 40
    for bad in (
        "lots",
        "-1",
        True,
        -5,
        float("nan"),
        float("inf"),
        10**30,
        "1" * 400 + "TiB",
        None,
        [1],
        {"a": 1},
        "9000000PiB",
        2**60,
    ):
        with pytest.raises(ResizeRefused) as e:
            parse_bytes(bad, "kv")
        assert e.value.field == "kv" and str(e.value).startswith("kv: ")


def test_resizes_below_the_working_minimum_are_refused_naming_it():
    """The KV pool keeps one request of max_model_len tokens: kv=0 or a fraction of a byte, or a
    total that would squeeze it below, are refused with the minimum; nothing changes."""
    eng = engine()
    mm = eng.memory
    before, least = mm.split(), 8 * mm.page_bytes
    assert mm.minimum() == {"kv": least, "experts": mm.slot_bytes, "states": 0}
    for kv in (0, 1.5, least - 1):
        with pytest.raises(ResizeRefused, match=f"below the minimum of {least} bytes") as e:
            eng.resize(kv=kv)
        assert e.value.field == "kv" and e.value.minimum == least
    with pytest.raises(ResizeRefused, match="max_model_len=128") as e:
        eng.resize(total=least)
    assert e.value.field == "total" and e.value.minimum == least + mm.slot_bytes == mm.min_total
    assert mm.split() == before
    rec = eng.resize(total=mm.min_total)  # exactly the minimum is fine, and still serves a request
    assert rec["after"]["kv_pages"] == 8 and rec["after"]["expert_slots"] == 1
    out = eng.generate("word " * 30, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    assert len(out[0].token_ids) == 8


def test_elastic_policy_hysteresis(tmp_path):
    G = 1 << 30
    p = ElasticPolicy(max_total=8 * G, reserve=1 * G, hysteresis=G // 2, patience=3)
    assert p.decide(free=3 * G, total=8 * G) is None  # at max
    assert p.decide(free=G // 4, total=8 * G) == 8 * G - 3 * G // 4  # pressure: shrink at once
    total = 8 * G - 3 * G // 4
    assert [p.decide(free=G + G // 4, total=total) for _ in range(5)] == [
        None
    ] * 5  # inside the band: hold
    assert [p.decide(free=3 * G, total=total) for _ in range(3)] == [
        None,
        None,
        8 * G,
    ]  # released: grow after patience
    f = tmp_path / "free"
    f.write_text(str(5 * G))
    src = file_source(f)
    assert src() == 5 * G
    f.write_text("garbage")
    assert src() == 5 * G  # a half-written file keeps the last value
