"""A hybrid model (tiny qwen3_next: Gated DeltaNet + attention) served for real, driven by the official
``openai`` and ``anthropic`` SDKs: the second turn of a conversation resumes from the state checkpoint
at the end of the first turn's prompt (or deeper) and re-prefills only its new suffix; usage and
``/metrics`` report it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from ft_core import Engine
from serve_helpers import API_KEY, start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))  # tiny_checkpoints (workspace tests)
import tiny_checkpoints  # noqa: E402

SYSTEM = "You are a coding agent. Answer briefly. " * 4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tiny_checkpoints.make_checkpoint("qwen3_next", tmp_path_factory.mktemp("q3n") / "qwen3_next")
    eng = Engine.from_pretrained(path)
    prompts, add = [], eng.add_request

    def record(prompt, *a, **k):  # the ids each request was admitted with (the engine itself runs them)
        seq = add(prompt, *a, **k)
        prompts.append(seq)
        return seq

    eng.add_request = record
    s = start_server(eng, api_key=API_KEY)
    yield s, eng, prompts
    s.stop()


def metric(server, name: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    return float(re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE).group(1))


def check_second_turn(seqs, cached: int, prompt_tokens: int) -> int:
    """The second request resumed where the first turn's prompt ends or, when the template re-renders the
    first turn differently (it drops an empty thinking block), exactly at the first changed token; it
    never resumes past that token. Returns the first changed position."""
    first, second = seqs[-2], seqs[-1]
    p1, p2 = first.prompt_ids, second.prompt_ids
    assert len(p2) == prompt_tokens and cached == second.cached_tokens
    lcp = next((i for i, (a, b) in enumerate(zip(p2, p1 + first.output_ids)) if a != b), len(p2))
    assert min(len(p1), lcp) <= cached <= lcp < len(p2)
    return lcp


def test_openai_second_turn_reprefills_only_the_suffix(served):
    server, _, seqs = served
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "List the files in src."}]
    r1 = client.chat.completions.create(model="ft-test", messages=msgs, max_tokens=8, temperature=0)
    assert r1.usage.prompt_tokens_details.cached_tokens == 0
    hits, prefilled = metric(server, "ft_prefix_checkpoint_hits_total"), metric(server, "ft_prefill_tokens_total")
    msgs += [{"role": "assistant", "content": r1.choices[0].message.content or ""},
             {"role": "user", "content": "Now open the first one."}]
    r2 = client.chat.completions.create(model="ft-test", messages=msgs, max_tokens=4, temperature=0)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    check_second_turn(seqs, cached, r2.usage.prompt_tokens)
    assert seqs[-2].prompt_ids == seqs[-1].prompt_ids[: len(seqs[-2].prompt_ids)]  # thinking on: turn 1 kept
    assert metric(server, "ft_prefix_checkpoint_hits_total") == hits + 1
    assert metric(server, "ft_prefill_tokens_total") == prefilled + r2.usage.prompt_tokens - cached
    assert metric(server, "ft_prefix_checkpoints") > 0


def test_anthropic_second_turn_reprefills_only_the_suffix(served):
    server, _, seqs = served
    client = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "What does main.py do?"}]
    m1 = client.messages.create(model="ft-test", system=SYSTEM, max_tokens=8, messages=msgs)
    text = "".join(b.text for b in m1.content if b.type == "text")
    hits, prefilled = metric(server, "ft_prefix_checkpoint_hits_total"), metric(server, "ft_prefill_tokens_total")
    msgs += [{"role": "assistant", "content": text or "ok"}, {"role": "user", "content": "And util.py?"}]
    m2 = client.messages.create(model="ft-test", system=SYSTEM, max_tokens=4, messages=msgs)
    cached = m2.usage.cache_read_input_tokens  # Anthropic counts input_tokens after the cached ones
    lcp = check_second_turn(seqs, cached, m2.usage.input_tokens + cached)
    assert cached == lcp  # no thinking: turn 1's empty think block is gone, resumed right before it
    assert metric(server, "ft_prefix_checkpoint_hits_total") == hits + 1
    assert metric(server, "ft_prefill_tokens_total") == prefilled + m2.usage.input_tokens
