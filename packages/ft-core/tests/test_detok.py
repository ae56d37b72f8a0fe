"""Incremental detokenization equals whole decoding; stop strings cut the stream exactly once."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ft_serve.server.detok import IncrementalDetokenizer, StopStrings

TEXTS = ["plain ascii words and <tool_call> markers", "naïve café — 日本語のテキスト 🙂🚀 emoji", "a\n\nb  c\t<think>x</think>"]


@settings(max_examples=40, deadline=None)
@given(text=st.sampled_from(TEXTS) | st.text(min_size=1, max_size=40), cuts=st.lists(st.integers(1, 4), max_size=30))
def test_incremental_equals_whole(demo_engine, text, cuts):
    tok = demo_engine.tokenizer
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
