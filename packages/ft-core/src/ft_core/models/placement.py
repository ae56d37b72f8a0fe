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
    return _walk(obj, lambda t: t.to(device), {} if memo is None else memo)


def holds_nan(obj) -> bool:
    """Whether ``obj`` (a layer, or a tuple of them) holds a floating-point tensor with a NaN, as the
    loader's placeholders for weights it expects kept in their stored bits are (QuantDense, the
    stored bits, are not looked into)."""
    found: list[bool] = []
    look = lambda t: (found.append(t.is_floating_point() and bool(t.isnan().any())), t)[1]  # noqa: E731
    _walk(obj, look, {}, quant_ok=True)
    return any(found)


def _walk(obj, fn, memo: dict[int, object], quant_ok: bool = False):
    """``obj`` with ``fn`` applied to each tensor it holds (see ``to_device``), each tensor once;
    a QuantDense (CPU-kernel bits) is refused unless ``quant_ok``, then left as it is."""
    key = id(obj)
    if key in memo:
        return memo[key]
    if isinstance(obj, torch.Tensor):
        out = fn(obj)
    elif isinstance(obj, QuantDense) and quant_ok:
        return obj
    elif isinstance(obj, QuantDense):
        raise FTError(
            "a dense weight held in a CPU-kernel format cannot move to the GPU (dense_format or a "
            "GGUF's stored bits are CPU-only)"
        )
    elif isinstance(obj, (list, tuple)):
        out = type(obj)(_walk(v, fn, memo, quant_ok) for v in obj)
    elif isinstance(obj, dict):
        out = {k: _walk(v, fn, memo, quant_ok) for k, v in obj.items()}
    elif type(obj).__module__.startswith(_OWN_STATE) and hasattr(obj, "__dict__"):
        memo[key] = obj  # cycles end here
        for name, v in list(vars(obj).items()):
            setattr(obj, name, _walk(v, fn, memo, quant_ok))
        return obj
    else:
        return obj
    memo[key] = out
    return out


def _parts(decoder) -> list:
    return [decoder.embed, decoder.norm, decoder.lm_head, decoder.layers, decoder.rotary]


def dense_nbytes(decoder) -> int:
    """Bytes of the dense state ``place_dense`` moves (each tensor once)."""
    sizes: list[int] = []
    memo: dict[int, object] = {}
    for part in _parts(decoder):
        _walk(part, lambda t: (sizes.append(t.numel() * t.element_size()), t)[1], memo)
    return sum(sizes)


def place_dense(decoder, device: torch.device, free_bytes: int | None = None) -> None:
    """Move a Decoder's dense state to ``device`` in place: embedding, final norm, LM head, every
    layer's (norms, attention, dense MLP or the MoE layer's router and shared expert) and the rotary
    tables; its expert bank and backend stay. Refuses (FTError naming both sizes) when the device's
    free memory (``free_bytes``; a GPU's is asked) cannot hold it, before moving anything."""
    if free_bytes is None and device.type == "cuda":
        free_bytes = torch.cuda.mem_get_info(device)[0]
    need = dense_nbytes(decoder)
    if free_bytes is not None and need > free_bytes:
        raise FTError(
            f"the dense weights need {need / 2**30:.2f} GiB on {device}, which has "
            f"{free_bytes / 2**30:.2f} GiB free (the experts stay in host memory); use --dtype "
            "bfloat16 if it is float32, free GPU memory, or --device cpu"
        )
    memo: dict[int, object] = {}
    decoder.embed, decoder.norm, decoder.lm_head, decoder.layers, decoder.rotary = (
        to_device(part, device, memo) for part in _parts(decoder)
    )
