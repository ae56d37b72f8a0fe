"""ExpertBank: every routed expert of the model in a few tensors whose first dim is the flat id.

Flat id = ``m * E + e`` where m is the index of the MoE layer among MoE layers (dense layers have no
experts) and e the expert. Layout per format (N = flat ids, I = expert intermediate, H = hidden):

- ``dense``: ``w13 [N, 2I, H]`` (gate rows, then up rows), ``w2 [N, H, I]``, stored dtype (bf16/f16/f32)
- ``fp8``:   ``w13``/``w2`` float8_e4m3fn as above, ``w13_scale [N, 2I, ceil(H/B1)]``,
             ``w2_scale [N, H, ceil(I/B1)]`` float32: one scale row per weight row (block rows expanded)
- ``mxfp4``: ``w13_blocks [N, 2I, H/32, 16]``, ``w13_scales [N, 2I, H/32]`` uint8; ``w2_*`` likewise
- ``nvfp4``: ``w13_q [N, 2I, H/2]`` uint8 (e2m1 pairs), ``w13_scale [N, 2I, H/16]`` uint8 e4m3, one global
             scale per matrix kind (``global_scale``); ``w2_*`` likewise
- ``int4_sym`` / ``int4_asym``: ``w13_q [N, 2I, H/2]`` uint8, ``w13_scale [N, 2I, ceil(H/G)]`` float32
             (+ ``w13_zero`` uint8 for asym), G = ``fp8_block``; ``w2_*`` likewise
- optional biases ``w13_bias [N, 2I]``, ``w2_bias [N, H]`` float32 (GPT-OSS)

The 4-bit and fp8 layouts are ``ft_kernels.formats`` ones. FTW checkpoints (``loader/ftw_*.py``) store
the banks in this layout and hand them over pre-built (``load`` asks the reader for ``expert_bank``).

Checkpoints store experts per expert (``experts.{e}.gate_proj`` …, Mixtral ``w1/w3/w2``) or fused
3D (``experts.gate_up_proj``; GPT-OSS [E, H, 2I] with gate/up interleaved); all become this layout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from ft_core.loader.quant import fp8_row_scales
from ft_core.loader.weights import FLOAT, FP8, WeightReader
from ft_core.model_config import ModelConfig

_PER_EXPERT_NAMES = {"mixtral": ("w1", "w3", "w2")}


@dataclass
class ExpertBank:
    fmt: str  # "dense" | "fp8" | "mxfp4" | "nvfp4" | "int4_sym" | "int4_asym"
    num_experts: int  # E per layer
    hidden: int  # H
    inter: int  # I
    act: str  # "swiglu" | "gptoss"
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    fp8_block: int = 0  # column group of the scales: B1 for fp8, G for int4_*
    global_scale: tuple[float, float] = (1.0, 1.0)  # nvfp4: (w13, w2) global scales
    _kernel_views: tuple | None = field(default=None, repr=False)

    @property
    def num_ids(self) -> int:
        return self.tensors[self._main()].shape[0]

    def _main(self) -> str:
        return {"mxfp4": "w13_blocks", "nvfp4": "w13_q", "int4_sym": "w13_q", "int4_asym": "w13_q"}.get(self.fmt, "w13")

    def nbytes_per_id(self) -> int:
        return sum(t[0].numel() * t.element_size() for t in self.tensors.values())

    def dequant(self, ids: torch.Tensor, which: str) -> torch.Tensor:
        """Float32 weights of ``which`` ("w13" [n, 2I, H] or "w2" [n, H, I]) for flat ``ids`` [n]."""
        if self.fmt == "dense":
            return self.tensors[which][ids].float()
        from ft_kernels.reference import dequantize  # the kernels' own reference twin

        w = self.kernel_weights()[0 if which == "w13" else 1]
        zero = None if w.zero is None else w.zero[ids]
        return dequantize(dataclasses.replace(w, q=w.q[ids], scale=w.scale[ids], zero=zero, bias=None))

    def bias(self, which: str) -> torch.Tensor | None:
        return self.tensors.get(f"{which}_bias")

    def kernel_weights(self):
        """(w13, w2) as ``ft_kernels.ExpertWeights`` views of this bank (no copies), or None when the
        stored format has no CPU kernel (float32 banks run on the torch backend). Cached."""
        if self._kernel_views is None:
            self._kernel_views = self._make_kernel_views() or ()
        return self._kernel_views or None

    def _make_kernel_views(self):
        from ft_kernels import ExpertWeights

        t = self.tensors
        out = []
        for which, cols in (("w13", self.hidden), ("w2", self.inter)):
            bias = t.get(f"{which}_bias")
            if self.fmt == "mxfp4":
                blocks = t[f"{which}_blocks"]
                q = blocks.view(blocks.shape[0], blocks.shape[1], -1)
                out.append(ExpertWeights("mxfp4", q, cols, t[f"{which}_scales"], group=32, bias=bias))
            elif self.fmt == "fp8":
                q = t[which].view(torch.uint8)
                out.append(ExpertWeights("fp8_e4m3", q, cols, t[f"{which}_scale"], group=self.fp8_block, bias=bias))
            elif self.fmt in ("nvfp4", "int4_sym", "int4_asym"):
                group = 16 if self.fmt == "nvfp4" else self.fp8_block
                gs = self.global_scale[0 if which == "w13" else 1]
                out.append(ExpertWeights(self.fmt, t[f"{which}_q"], cols, t[f"{which}_scale"], t.get(f"{which}_zero"),
                                         group=group, global_scale=gs, bias=bias))
            elif t[which].dtype in (torch.bfloat16, torch.float16):
                fmt = "bf16" if t[which].dtype == torch.bfloat16 else "f16"
                out.append(ExpertWeights(fmt, t[which], cols, bias=bias))
            else:
                return None
        return tuple(out)

    @classmethod
    def load(cls, r: WeightReader, cfg: ModelConfig, prefixes: list[str]) -> "ExpertBank":
        """Read the experts of every MoE layer (``prefixes[m]`` = that layer's MLP module name)."""
        prebuilt = getattr(r, "expert_bank", None)  # FTW readers hold the bank already (loader/ftw_read.py)
        if prebuilt is not None:
            return prebuilt(cfg, prefixes)
        m = cfg.moe
        E, H, I = m.num_experts, cfg.hidden_size, m.intermediate
        L = len(prefixes)
        probe = _first_weight_name(r, cfg, prefixes[0])
        _check_dtypes(r, prefixes)
        stored = r.stored_dtype(probe)
        fmt = "mxfp4" if probe.endswith("_blocks") else "fp8" if stored == torch.float8_e4m3fn else "dense"
        bank = cls(fmt, E, H, I, m.act, fp8_block=cfg.quant.block[1] if fmt == "fp8" else 0)
        alloc = _Alloc(bank, L * E, H, I, stored, cfg)
        for li, p in enumerate(prefixes):
            if fmt == "mxfp4":
                _load_mxfp4(r, bank, p, li * E, E, H, I)
            elif r.has(f"{p}.experts.gate_up_proj"):
                _load_fused(r, bank, p, li * E, E, H, I, interleaved=m.act == "gptoss")
            else:
                _load_per_expert(r, bank, p, li * E, E, H, I, _PER_EXPERT_NAMES.get(cfg.model_type, ("gate_proj", "up_proj", "down_proj")))
            if m.expert_bias:
                gub = r.tensor(f"{p}.experts.gate_up_proj_bias", (E, 2 * I), torch.float32)
                bank.tensors["w13_bias"][li * E : (li + 1) * E] = _deinterleave(gub, dim=1)
                bank.tensors["w2_bias"][li * E : (li + 1) * E] = r.tensor(f"{p}.experts.down_proj_bias", (E, H), torch.float32)
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
    for cand in (f"{p}.experts.gate_up_proj_blocks", f"{p}.experts.gate_up_proj",
                 f"{p}.experts.0.{_PER_EXPERT_NAMES.get(cfg.model_type, ('gate_proj',))[0]}.weight"):
        if r.has(cand):
            return cand
    raise_missing(r, f"{p}.experts.0.gate_proj.weight (or fused {p}.experts.gate_up_proj)")


def raise_missing(r: WeightReader, what: str):
    from ft_core.errors import CheckpointError

    raise CheckpointError(f"{r.index.dir}: expert tensor {what} is missing from the checkpoint")


class _Alloc:
    """Preallocate the bank tensors once, so loading fills them in place (no second full copy)."""

    def __init__(self, bank: ExpertBank, N: int, H: int, I: int, stored: torch.dtype, cfg: ModelConfig):
        t = bank.tensors
        if bank.fmt == "mxfp4":
            t["w13_blocks"] = torch.empty(N, 2 * I, H // 32, 16, dtype=torch.uint8)
            t["w13_scales"] = torch.empty(N, 2 * I, H // 32, dtype=torch.uint8)
            t["w2_blocks"] = torch.empty(N, H, I // 32, 16, dtype=torch.uint8)
            t["w2_scales"] = torch.empty(N, H, I // 32, dtype=torch.uint8)
        else:
            t["w13"] = torch.empty(N, 2 * I, H, dtype=stored)
            t["w2"] = torch.empty(N, H, I, dtype=stored)
        if bank.fmt == "fp8":
            b1 = bank.fp8_block
            t["w13_scale"] = torch.empty(N, 2 * I, -(-H // b1))
            t["w2_scale"] = torch.empty(N, H, -(-I // b1))
        if cfg.moe.expert_bias:
            t["w13_bias"] = torch.empty(N, 2 * I)
            t["w2_bias"] = torch.empty(N, H)


def _deinterleave(x: torch.Tensor, dim: int) -> torch.Tensor:
    """GPT-OSS stores gate/up interleaved (g0, u0, g1, u1, ...) along ``dim``; return gates then ups."""
    idx = torch.cat([torch.arange(0, x.shape[dim], 2), torch.arange(1, x.shape[dim], 2)])
    return x.index_select(dim, idx)


def _load_per_expert(r, bank, p, base, E, H, I, names):
    """Each expert matrix read straight into its rows of the bank (one pass over the layer, file order)."""
    g, u, d = names
    t = bank.tensors
    jobs = []
    for e in range(E):
        q = f"{p}.experts.{e}"
        for rows, name, shape in ((slice(0, I), g, (I, H)), (slice(I, 2 * I), u, (I, H)), (None, d, (H, I))):
            dst = "w13" if rows is not None else "w2"
            jobs.append((f"{q}.{name}.weight", t[dst][base + e] if rows is None else t[dst][base + e, rows]))
            if bank.fmt == "fp8":
                b0, b1 = r.quant.block
                s = r.raw(f"{q}.{name}.weight_scale_inv", (-(-shape[0] // b0), -(-shape[1] // b1)))
                sv = t[f"{dst}_scale"][base + e] if rows is None else t[f"{dst}_scale"][base + e, rows]
                sv.copy_(fp8_row_scales(s, shape[0], b0))
    r.read_into(jobs)


def _load_fused(r, bank, p, base, E, H, I, interleaved: bool):
    t = bank.tensors
    if interleaved:  # GPT-OSS bf16: gate_up_proj [E, H, 2I] (in, out), interleaved; down_proj [E, I, H]
        gu = r.raw(f"{p}.experts.gate_up_proj", (E, H, 2 * I))  # one layer's temporary
        _deinterleave_into(gu.transpose(1, 2), t["w13"][base : base + E], dim=1)
        del gu
        t["w2"][base : base + E] = r.raw(f"{p}.experts.down_proj", (E, I, H)).transpose(1, 2)
    else:  # Qwen3.5-style: gate_up_proj [E, 2I, H] gate rows first; down_proj [E, H, I]: read in place
        r.read_into([(f"{p}.experts.gate_up_proj", t["w13"][base : base + E]),
                     (f"{p}.experts.down_proj", t["w2"][base : base + E])])


def _load_mxfp4(r, bank, p, base, E, H, I):
    t = bank.tensors
    for src, dst in (("gate_up_proj_blocks", "w13_blocks"), ("gate_up_proj_scales", "w13_scales")):
        x = r.raw(f"{p}.experts.{src}", (E, *t[dst].shape[1:]))  # one layer's temporary
        _deinterleave_into(x, t[dst][base : base + E], dim=1)
        del x
    r.read_into([(f"{p}.experts.down_proj_blocks", t["w2_blocks"][base : base + E]),
                 (f"{p}.experts.down_proj_scales", t["w2_scales"][base : base + E])])


def _deinterleave_into(x: torch.Tensor, out: torch.Tensor, dim: int) -> None:
    """``out`` (mutated) = ``_deinterleave(x, dim)``, written in place (no second temporary)."""
    pick = lambda start: x[(slice(None),) * dim + (slice(start, None, 2),)]  # noqa: E731
    even, odd = pick(0), pick(1)
    out.narrow(dim, 0, even.shape[dim]).copy_(even)
    out.narrow(dim, even.shape[dim], odd.shape[dim]).copy_(odd)
