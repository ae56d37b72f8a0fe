"""Dense weights onto the device (``EngineConfig.dense_device``): every tensor the decoder's layers
hold (projections, norms, router weights, rotary tables, ...) moved once at load, shared tensors
(tied embeddings, one Rotary for all layers) moved once and kept shared. The expert bank and the
expert backends are not layers' own state and stay where they are: host memory is the experts'
source of truth, the expert cache (experts/cache.py) holds their device copies.
"""

from __future__ import annotations

import torch

from ft_core.errors import FTError
from ft_core.layers.dense import QuantDense

_OWN_STATE = ("ft_core.layers.",)  # objects whose tensors are a layer's weights


def to_device(obj, device: torch.device, memo: dict[int, object] | None = None):
    """``obj`` with its tensors on ``device``: a tensor (moved), a list / tuple / dict (rebuilt) or a
    layer object (ft_core.layers.*; its attributes replaced in place). Anything else is returned as
    it is. ``memo`` maps id(original) -> moved, so a tensor held twice is moved once."""
    memo = {} if memo is None else memo
    key = id(obj)
    if key in memo:
        return memo[key]
    if isinstance(obj, torch.Tensor):
        out = obj.to(device)
    elif isinstance(obj, QuantDense):
        raise FTError(
            "a dense weight held in a CPU-kernel format cannot move to the GPU (dense_format or a "
            "GGUF's stored bits are CPU-only)"
        )
    elif isinstance(obj, (list, tuple)):
        out = type(obj)(to_device(v, device, memo) for v in obj)
    elif isinstance(obj, dict):
        out = {k: to_device(v, device, memo) for k, v in obj.items()}
    elif type(obj).__module__.startswith(_OWN_STATE) and hasattr(obj, "__dict__"):
        memo[key] = obj  # cycles end here
        for name, v in list(vars(obj).items()):
            setattr(obj, name, to_device(v, device, memo))
        return obj
    else:
        return obj
    memo[key] = out
    return out


def place_dense(decoder, device: torch.device) -> None:
    """Move a Decoder's dense state to ``device`` in place: embedding, final norm, LM head, every
    layer's (norms, attention, dense MLP or the MoE layer's router and shared expert) and the rotary
    tables; its expert bank and backend stay."""
    memo: dict[int, object] = {}
    decoder.embed, decoder.norm, decoder.lm_head = (
        to_device(t, device, memo) for t in (decoder.embed, decoder.norm, decoder.lm_head)
    )
    decoder.layers = to_device(decoder.layers, device, memo)
    decoder.rotary = to_device(decoder.rotary, device, memo)
