"""Incremental detokenization equals whole decoding; stop strings cut the stream exactly once."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ft_core.tokenizer.detok import IncrementalDetokenizer, StopStrings
from ft_core.tokenizer.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def demo_tok(demo_dir):
    """The demo checkpoint's byte-level BPE tokenizer."""
    return Tokenizer.from_dir(demo_dir)


TEXTS = [
    "plain ascii words and <tool_call> markers",
    "naïve café — 日本語のテキスト 🙂🚀 emoji",
    "a\n\nb  c\t<think>x</think>",
]


@settings(max_examples=40, deadline=None)
@given(
    text=st.sampled_from(TEXTS) | st.text(min_size=1, max_size=40),
    cuts=st.lists(st.integers(1, 4), max_size=30),
)
def test_incremental_equals_whole(demo_tok, text, cuts):
    tok = demo_tok
    ids = tok.encode(text, add_special_tokens=False)
    d = IncrementalDetokenizer(lambda x: tok.decode(x, skip_special_tokens=False))
    out, i = [], 0
    for c in cuts + [len(ids)]:
        out.append(d.push(ids[i : i + c]))
        i += c
        if i >= len(ids):
            break
    out.append(d.flush())
    assert "".join(out) == tok.decode(ids, skip_special_tokens=False)


@settings(max_examples=100, deadline=None)
@given(pieces=st.lists(st.text(alphabet="abST", max_size=4), max_size=12))
def test_stop_strings_cut_at_the_first_match(pieces):
    stops = ("STOP", "bb")
    s = StopStrings(stops)
    out = "".join(s.push(p) for p in pieces) + s.flush()
    full = "".join(pieces)
    hits = [i for t in stops if (i := full.find(t)) >= 0]
    assert out == (full[: min(hits)] if hits else full)
    assert (s.matched is not None) == bool(hits)


def test_stop_strings_hold_back_only_a_possible_prefix():
    s = StopStrings(("</end>",))
    assert s.push("hello <") == "hello "  # "<" may start the stop string
    assert s.push("b>") == "<b>"
    assert StopStrings(()).push("x") == "x"


@pytest.mark.parametrize(
    "text,stops",
    [(TEXTS[1], ("日本",)), (TEXTS[1], ("never there",)), (TEXTS[2], ("</think>", "b "))],
)
def test_stop_scanner_equals_a_whole_decode_cut(demo_tok, text, stops):
    """The engine's check (one token at a time) gives what a whole decode cut at the first stop gives."""
    from ft_core.tokenizer.detok import StopScanner

    ids = demo_tok.encode(text, add_special_tokens=False)
    scan = StopScanner(lambda x: demo_tok.decode(x, skip_special_tokens=False), stops)
    hit_at = next((n for n, t in enumerate(ids) if scan.push(t)), None)
    whole = demo_tok.decode(ids, skip_special_tokens=False)
    cut = min((i for s in stops if (i := whole.find(s)) >= 0), default=None)
    assert (hit_at is not None) == (cut is not None)
    assert scan.text() == (whole if cut is None else whole[:cut])
