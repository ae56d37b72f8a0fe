"""Dense weights on the GPU (device="cuda", models/placement.py), checked without one: every tensor a
decoder's layers hold must move, or the first GPU forward fails on a device mismatch. Moving to
torch's ``meta`` device (shapes, no data) and then walking *every* attribute reachable from the
decoder but its expert bank and backend finds any tensor the placement missed; the batch tensors the
layers build per forward must follow the batch's device too."""

import pytest
import torch

from ft_core import Engine
from ft_core.experts.backends import ExpertBackend
from ft_core.experts.bank import ExpertBank
from ft_core.layers.attn_window import _Plan
from ft_core.layers.batch import ForwardBatch
from ft_core.models.placement import place_dense

META = torch.device("meta")
ARCHS = [
    ("qwen3_moe", None),
    ("mixtral", None),
    ("deepseek_v3", "fp8"),
    ("gpt_oss", "mxfp4"),
    ("glm4_moe", None),
    ("qwen3_next", None),
    ("qwen3_5_moe", None),
]


def host_tensors(obj, path="decoder", seen=None) -> list[str]:
    """Paths of the non-meta tensors reachable from ``obj`` through attributes, lists, tuples and
    dicts, the expert bank and backends left out (they stay on the host by design)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, (ExpertBank, ExpertBackend, type)) or callable(obj):
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [] if obj.device == META else [path]
    if isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif isinstance(obj, dict):
        items = obj.items()
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("ft_core"):
        items = vars(obj).items()
    else:
        return []
    return [p for k, v in items for p in host_tensors(v, f"{path}.{k}", seen)]


@pytest.mark.parametrize("arch,variant", ARCHS)
def test_placement_moves_every_dense_tensor(tiny_ckpt, arch, variant):
    model = Engine.from_pretrained(tiny_ckpt(arch, variant), decode_plans=False).model
    assert host_tensors(model.layers), "the walker sees the layers' tensors on the host first"
    place_dense(model, META)
    model.plans = None  # built from the host weights (CPU plans); not part of the placement
    assert host_tensors(model) == []
    assert model.device == META
    assert all(t.device.type == "cpu" for t in model.bank.tensors.values())


def test_batch_tensors_follow_the_batch_device():
    fb = ForwardBatch(
        torch.tensor([5, 6, 7, 8]),
        torch.tensor([3, 4, 5, 0]),
        torch.tensor([3, 4, 5, 16]),
        torch.tensor([[0, 2], [1, 0]]),
        [3, 1],
        [6, 1],
        16,
        type("State", (), {"slots": [2, 0]})(),
    ).to(META)
    made = [fb.mask(None), fb.mask(4), fb.ctx_tensor(), fb.state_slots_tensor()]
    made += [fb.last_token_index(), fb.dest, fb.q_pos, fb.page_table, fb.slots]
    assert all(t.device == META for t in made)
    plan = _Plan(fb, 4)  # the window rings' plan (GPT-OSS), built per forward from the batch
    assert host_tensors(plan) == []


def test_placement_refuses_what_the_device_cannot_hold(tiny_ckpt):
    """Too little free device memory for the dense weights: an error naming both sizes and what to
    do, before anything moves."""
    from ft_core.errors import FTError
    from ft_core.models.placement import dense_nbytes

    model = Engine.from_pretrained(tiny_ckpt("qwen3_moe"), decode_plans=False).model
    need = dense_nbytes(model)
    assert need > model.embed.numel() * model.embed.element_size()
    with pytest.raises(FTError, match=r"dense weights need .* GiB on meta, which has .* free"):
        place_dense(model, META, free_bytes=need - 1)
    assert model.device.type == "cpu" and host_tensors(model.layers)  # nothing moved
    place_dense(model, META, free_bytes=need)  # exactly enough
    model.plans = None
    assert host_tensors(model) == []
