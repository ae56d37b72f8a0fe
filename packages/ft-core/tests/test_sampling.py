"""Sampler: each filter and penalty against a direct computation; seeds reproduce; bad fields are named."""

import pytest
import torch

from ft_core import RequestError, SamplingParams
from ft_core.sampling import apply_penalties, filter_logits, sample_one


def _logits(seed=0, V=50):
    return torch.randn(V, generator=torch.Generator().manual_seed(seed)) * 3


def test_greedy_is_argmax():
    lg = _logits()
    assert sample_one(lg, SamplingParams(temperature=0), [], [], None) == int(lg.argmax())


@pytest.mark.parametrize(
    "p", [SamplingParams(top_k=1), SamplingParams(top_p=1e-6), SamplingParams(min_p=1.0)]
)
def test_filters_that_leave_one_token_equal_greedy(p):
    lg = _logits(1)
    g = torch.Generator().manual_seed(0)
    assert all(sample_one(lg, p, [], [], g) == int(lg.argmax()) for _ in range(20))


def test_top_k_support():
    lg = _logits(2)
    top3 = set(torch.topk(lg, 3).indices.tolist())
    g = torch.Generator().manual_seed(0)
    draws = {
        sample_one(lg, SamplingParams(top_k=3, temperature=5.0), [], [], g) for _ in range(200)
    }
    assert draws <= top3 and len(draws) == 3


def test_top_p_keeps_smallest_prefix():
    lg = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    out = filter_logits(lg, SamplingParams(top_p=0.7))
    assert torch.isfinite(out).tolist() == [True, True, False, False]
    out = filter_logits(lg, SamplingParams(top_p=0.8))
    assert torch.isfinite(out).tolist() == [True, True, False, False]
    out = filter_logits(lg, SamplingParams(top_p=0.81))
    assert torch.isfinite(out).tolist() == [True, True, True, False]


def test_min_p():
    lg = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    out = filter_logits(lg, SamplingParams(min_p=0.25))  # keep p >= 0.125
    assert torch.isfinite(out).tolist() == [True, True, True, False]


def test_temperature_scales():
    lg = _logits(3)
    assert torch.allclose(filter_logits(lg, SamplingParams(temperature=2.0)), lg / 2)


def test_repetition_penalty_hf_rule():
    lg = torch.tensor([2.0, -2.0, 1.0, 0.5])
    out = apply_penalties(lg, SamplingParams(repetition_penalty=2.0), [0], [1])
    assert out.tolist() == [1.0, -4.0, 1.0, 0.5]


def test_presence_and_frequency_penalties():
    lg = torch.zeros(4)
    out = apply_penalties(
        lg, SamplingParams(presence_penalty=0.5, frequency_penalty=0.25), [3], [1, 1, 2]
    )
    assert out.tolist() == [0.0, -1.0, -0.75, 0.0]  # prompt tokens are not penalised by these


def test_same_seed_same_draws_and_seeds_differ():
    lg = _logits(4) / 3
    p = SamplingParams(temperature=1.0)

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        return [sample_one(lg, p, [], [], g) for _ in range(30)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_banned_ids():
    lg = _logits(5)
    top = int(lg.argmax())
    assert sample_one(lg, SamplingParams(temperature=0), [], [], None, banned=[top]) != top


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"min_p": 2}, "min_p"),
        ({"top_k": -5}, "top_k"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"min_tokens": 99, "max_tokens": 3}, "min_tokens"),
    ],
)
def test_bad_fields_are_named(kw, field):
    with pytest.raises(RequestError, match=field):
        SamplingParams(**kw)
