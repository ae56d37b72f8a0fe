"""Expert banks from a Hugging Face checkpoint: the expert tensor names of each architecture, read
into one ``ExpertBank`` (layout: ``experts/bank.py``) whose first dim is the flat id ``m * E + e``.

Checkpoints store experts per expert (``experts.{e}.gate_proj`` …, Mixtral ``w1/w3/w2``) or fused
3D (``experts.gate_up_proj``; GPT-OSS [E, H, 2I] with gate/up interleaved; MXFP4 ``*_blocks`` /
``*_scales``); all become the bank layout, filled in place (one layer's temporary at most).
Legend: E = experts per layer, H = hidden, I = expert intermediate, L = MoE layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ft_core.errors import CheckpointError
from ft_core.experts.bank import FLOAT_FORMATS, ExpertBank, bank_format
from ft_core.loader.quant import FLOAT, FP8, fp8_row_scales
from ft_core.model_config import ModelConfig

if TYPE_CHECKING:
    from ft_core.loader.weights import WeightReader

_PER_EXPERT_NAMES = {"mixtral": ("w1", "w3", "w2")}
_DEFAULT_NAMES = ("gate_proj", "up_proj", "down_proj")


def load_hf_bank(r: WeightReader, cfg: ModelConfig, prefixes: list[str]) -> ExpertBank:
    """Read the experts of every MoE layer (``prefixes[m]`` = that layer's MLP module name) into one
    bank of L * E flat ids: ``bf16`` / ``f16`` / ``f32`` (the stored float dtype), ``fp8_e4m3`` (row scales) or
    ``mxfp4``."""
    m = cfg.moe
    E, H, I = m.num_experts, cfg.hidden_size, m.intermediate
    L = len(prefixes)
    probe = _first_weight_name(r, cfg, prefixes[0])
    _check_dtypes(r, prefixes)
    stored = r.stored_dtype(probe)
    fp8 = stored == torch.float8_e4m3fn
    if not fp8 and stored not in FLOAT_FORMATS and not probe.endswith("_blocks"):
        stored = torch.float32  # float64 / float8_e5m2 experts are held as float32 (exact for e5m2)
    fmt = (
        "mxfp4"
        if probe.endswith("_blocks")
        else "fp8_e4m3"
        if fp8
        else bank_format("dense", stored)
    )
    bank = ExpertBank(fmt, E, H, I, m.act, fp8_block=cfg.quant.block[1] if fp8 else 0)
    alloc = _Alloc(bank, L * E, H, I, stored, cfg)
    names = _PER_EXPERT_NAMES.get(cfg.model_type, _DEFAULT_NAMES)
    for li, p in enumerate(prefixes):
        if fmt == "mxfp4":
            _load_mxfp4(r, bank, p, li * E, E, H, I)
        elif r.has(f"{p}.experts.gate_up_proj"):
            _load_fused(r, bank, p, li * E, E, H, I, interleaved=m.act == "gptoss")
        else:
            _load_per_expert(r, bank, p, li * E, E, H, I, names)
        if m.expert_bias:
            rows = slice(li * E, (li + 1) * E)
            gub = r.tensor(f"{p}.experts.gate_up_proj_bias", (E, 2 * I), torch.float32)
            bank.tensors["w13_bias"][rows] = _deinterleave(gub, dim=1)
            down = r.tensor(f"{p}.experts.down_proj_bias", (E, H), torch.float32)
            bank.tensors["w2_bias"][rows] = down
    del alloc
    return bank


def _check_dtypes(r: WeightReader, prefixes: list[str]) -> None:
    """Every stored expert tensor: MXFP4 ``*_blocks``/``*_scales`` uint8, weights floating or fp8,
    scales and biases floating (an int32 bank would otherwise be converted silently)."""
    heads = tuple(f"{p}.experts." for p in prefixes)
    for name in r.index.names():
        if name.startswith(heads):
            mx = name.endswith(("_blocks", "_scales"))
            plain = not mx and not name.endswith(("_scale_inv", "_bias"))
            r.check_dtype(name, (torch.uint8,) if mx else FLOAT + FP8 if plain else FLOAT)


def _first_weight_name(r: WeightReader, cfg: ModelConfig, p: str) -> str:
    gate = _PER_EXPERT_NAMES.get(cfg.model_type, _DEFAULT_NAMES)[0]
    for cand in (
        f"{p}.experts.gate_up_proj_blocks",
        f"{p}.experts.gate_up_proj",
        f"{p}.experts.0.{gate}.weight",
    ):
        if r.has(cand):
            return cand
    raise_missing(r, f"{p}.experts.0.gate_proj.weight (or fused {p}.experts.gate_up_proj)")


def raise_missing(r: WeightReader, what: str):
    raise CheckpointError(f"{r.index.dir}: expert tensor {what} is missing from the checkpoint")


class _Alloc:
    """Preallocate the bank tensors once, so loading fills them in place (no second full copy)."""

    def __init__(
        self, bank: ExpertBank, N: int, H: int, I: int, stored: torch.dtype, cfg: ModelConfig
    ):
        t = bank.tensors
        if bank.fmt == "mxfp4":
            t["w13_blocks"] = torch.empty(N, 2 * I, H // 32, 16, dtype=torch.uint8)
            t["w13_scales"] = torch.empty(N, 2 * I, H // 32, dtype=torch.uint8)
            t["w2_blocks"] = torch.empty(N, H, I // 32, 16, dtype=torch.uint8)
            t["w2_scales"] = torch.empty(N, H, I // 32, dtype=torch.uint8)
        else:
            t["w13"] = torch.empty(N, 2 * I, H, dtype=stored)
            t["w2"] = torch.empty(N, H, I, dtype=stored)
        if bank.fmt == "fp8_e4m3":
            b1 = bank.fp8_block
            t["w13_scale"] = torch.empty(N, 2 * I, -(-H // b1))
            t["w2_scale"] = torch.empty(N, H, -(-I // b1))
        if cfg.moe.expert_bias:
            t["w13_bias"] = torch.empty(N, 2 * I)
            t["w2_bias"] = torch.empty(N, H)


def _deinterleave(x: torch.Tensor, dim: int) -> torch.Tensor:
    """GPT-OSS stores gate/up interleaved (g0, u0, g1, u1, ...) along ``dim``; return gates, then
    ups."""
    idx = torch.cat([torch.arange(0, x.shape[dim], 2), torch.arange(1, x.shape[dim], 2)])
    return x.index_select(dim, idx)


def _load_per_expert(r, bank, p, base, E, H, I, names):
    """Each expert matrix read straight into its rows of the bank (one pass over the layer, file
    order)."""
    g, u, d = names
    t = bank.tensors
    jobs = []
    for e in range(E):
        q = f"{p}.experts.{e}"
        parts = ((slice(0, I), g, (I, H)), (slice(I, 2 * I), u, (I, H)), (None, d, (H, I)))
        for rows, name, shape in parts:
            dst = "w13" if rows is not None else "w2"
            row = t[dst][base + e] if rows is None else t[dst][base + e, rows]
            jobs.append((f"{q}.{name}.weight", row))
            if bank.fmt == "fp8_e4m3":
                b0, b1 = r.quant.block
                s = r.raw(f"{q}.{name}.weight_scale_inv", (-(-shape[0] // b0), -(-shape[1] // b1)))
                sc = t[f"{dst}_scale"]
                sv = sc[base + e] if rows is None else sc[base + e, rows]
                sv.copy_(fp8_row_scales(s, shape[0], b0))
    r.read_into(jobs)


def _load_fused(r, bank, p, base, E, H, I, interleaved: bool):
    t = bank.tensors
    if interleaved:
        # GPT-OSS bf16: gate_up_proj [E, H, 2I] (in, out), interleaved; down_proj [E, I, H]
        gu = r.raw(f"{p}.experts.gate_up_proj", (E, H, 2 * I))  # one layer's temporary
        _deinterleave_into(gu.transpose(1, 2), t["w13"][base : base + E], dim=1)
        del gu
        t["w2"][base : base + E] = r.raw(f"{p}.experts.down_proj", (E, I, H)).transpose(1, 2)
    else:
        # Qwen3.5-style: gate_up_proj [E, 2I, H] gate rows first; down_proj [E, H, I]: in place
        r.read_into(
            [
                (f"{p}.experts.gate_up_proj", t["w13"][base : base + E]),
                (f"{p}.experts.down_proj", t["w2"][base : base + E]),
            ]
        )


def _load_mxfp4(r, bank, p, base, E, H, I):
    t = bank.tensors
    for src, dst in (("gate_up_proj_blocks", "w13_blocks"), ("gate_up_proj_scales", "w13_scales")):
        x = r.raw(f"{p}.experts.{src}", (E, *t[dst].shape[1:]))  # one layer's temporary
        _deinterleave_into(x, t[dst][base : base + E], dim=1)
        del x
    r.read_into(
        [
            (f"{p}.experts.down_proj_blocks", t["w2_blocks"][base : base + E]),
            (f"{p}.experts.down_proj_scales", t["w2_scales"][base : base + E]),
        ]
    )


def _deinterleave_into(x: torch.Tensor, out: torch.Tensor, dim: int) -> None:
    """``out`` (mutated) = ``_deinterleave(x, dim)``, written in place (no second temporary)."""
    pick = lambda start: x[(slice(None),) * dim + (slice(start, None, 2),)]  # noqa: E731
    even, odd = pick(0), pick(1)
    out.narrow(dim, 0, even.shape[dim]).copy_(even)
    out.narrow(dim, even.shape[dim], odd.shape[dim]).copy_(odd)
