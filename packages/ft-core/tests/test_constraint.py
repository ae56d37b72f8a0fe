"""Token constraints in the engine: every sampled token is allowed, a finished constraint ends the
sequence, unconstrained requests in the same batch are unchanged."""

import torch

from ft_core import Engine, SamplingParams
from ft_core.constraint import TokenConstraint, mask_logits


class Sequence(TokenConstraint):
    """Allow exactly one token sequence (a real, if tiny, constraint: a forced output)."""

    def __init__(self, ids):
        self.ids, self.pos, self.seen = list(ids), 0, []

    def allowed(self, vocab_size):
        m = torch.zeros(vocab_size, dtype=torch.bool)
        m[self.ids[self.pos]] = True
        return m

    def accept(self, token):
        self.seen.append(token)
        self.pos += 1

    def finished(self):
        return self.pos == len(self.ids)


class EvenTokens(TokenConstraint):
    def allowed(self, vocab_size):
        return torch.arange(vocab_size) % 2 == 0

    def accept(self, token):
        assert token % 2 == 0


def test_constrained_requests_follow_their_constraint_and_others_do_not_change():
    eng = Engine.from_pretrained(None)
    p = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    free_alone = eng.generate("plain request", p)[0].token_ids
    forced = Sequence([7, 300, 42, 9])
    a = eng.add_request("forced", p, constraint=forced)
    b = eng.add_request("plain request", p)
    c = eng.add_request(
        "even", SamplingParams(max_tokens=12, temperature=1.0, seed=3), constraint=EvenTokens()
    )
    while not (a.finished and b.finished and c.finished):
        eng.step()
    assert a.output_ids == [7, 300, 42, 9] and a.finish_reason == "stop"
    assert b.output_ids == free_alone
    assert all(t % 2 == 0 for t in c.output_ids)


def test_mask_logits():
    x = torch.tensor([1.0, 5.0, 3.0, 2.0])
    y = mask_logits(
        x, torch.tensor([True, False, True])
    )  # shorter mask: ids past it are disallowed
    assert y.tolist() == [1.0, float("-inf"), 3.0, float("-inf")]
    assert torch.equal(
        mask_logits(x, torch.zeros(4, dtype=torch.bool)), x
    )  # nothing allowed: unchanged
