"""ExpertBank: every routed expert of the model in a few tensors whose first dim is the flat id.

Flat id = ``m * E + e`` where m is the index of the MoE layer among MoE layers (dense layers have no
experts) and e the expert. The formats are the kernels' own (``ft_kernels.FORMATS``) plus ``f32``, which no
kernel takes. Layout per format (N = flat ids, I = expert intermediate, H = hidden):

- ``bf16`` / ``f16`` / ``f32``: ``w13 [N, 2I, H]`` (gate rows, then up rows), ``w2 [N, H, I]`` in that dtype
- ``fp8_e4m3``: ``w13``/``w2`` float8_e4m3fn as above, ``w13_scale [N, 2I, ceil(H/B1)]``,
             ``w2_scale [N, H, ceil(I/B1)]`` float32: one scale row per weight row (block rows expanded)
- ``mxfp4``: ``w13_blocks [N, 2I, H/32, 16]``, ``w13_scales [N, 2I, H/32]`` uint8; ``w2_*`` likewise
- ``nvfp4``: ``w13_q [N, 2I, H/2]`` uint8 (e2m1 pairs), ``w13_scale [N, 2I, H/16]`` uint8 e4m3, one global
             scale per matrix kind (``global_scale``); ``w2_*`` likewise
- ``int4_sym`` / ``int4_asym``: ``w13_q [N, 2I, H/2]`` uint8, ``w13_scale [N, 2I, ceil(H/G)]`` float32
             (+ ``w13_zero`` uint8 for asym), G = ``fp8_block``; ``w2_*`` likewise
- ``int8_sym``: ``w13_q [N, 2I, H]`` uint8 holding int8, ``w13_scale [N, 2I, ceil(H/G)]`` float32 (GGUF
             Q8_0: G = 32); ``w2_*`` likewise
- ``q4_k`` / ``q5_k`` / ``q6_k`` / ``q3_k`` / ``q2_k`` (GGUF K-quant super-blocks, scales inside):
             ``w13_q [N, 2I, B]``, ``w2_q [N, H, B]`` uint8, B the bytes of a row's blocks
- optional biases ``w13_bias [N, 2I]``, ``w2_bias [N, H]`` float32 (GPT-OSS)

Mixed K-quant banks: llama.cpp's Q4_K_M / Q5_K_M / Q4_K_S / Q3_K_M / Q2_K files quantise ``ffn_down`` of
some layers to a wider K-quant than the rest. Then ``layer_fmts`` gives each MoE layer's (w13, w2) format,
any of the five K-quants (widest row: Q6_K's), ``fmt`` is layer 0's w13 format, and a kind's tensor is
[N, rows, B] with B its widest layer's row bytes. Each layer's [E, rows, B] region holds its rows either
padded at their ends (the kernels read only a row's blocks; FTW banks) or, when ``compact``, gapless at
the region's start, its tail never written nor read (GGUF banks: a decode step reads no padding, and the
tail's pages never become resident). ``layer_view`` gives a layer's rows either way.

The 4-bit and fp8 layouts are ``ft_kernels.formats`` ones. Banks are built by the loader: from a
Hugging Face checkpoint's expert tensors (``loader/hf_experts.py``) or pre-built from an FTW
directory (``loader/ftw_read.py``); both through ``WeightReader.expert_bank``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import ft_kernels
import torch
from ft_kernels import kquants
from ft_kernels.formats import scales_f16

FLOAT_FORMATS = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
# "q4_k", "q5_k", "q6_k", "q3_k", "q2_k" as GGUF stores them, and q4_k / q6_k with 16 rows interleaved (``interleave``)
KQUANT_FORMATS = kquants.FORMATS
BANK_FORMATS = (*ft_kernels.FORMATS, "f32")
# Names FTW indexes written before the bank took the kernels' names: "dense" (the float dtype decides) and "fp8".
_LEGACY = {"fp8": "fp8_e4m3"}


def bank_format(name: str, dtype: torch.dtype | None = None) -> str:
    """``name`` as an ExpertBank format, old FTW names included ("dense" -> the name of ``dtype``, the
    bank's float dtype; "fp8" -> "fp8_e4m3"). ValueError for anything else unknown."""
    if name == "dense" and dtype in FLOAT_FORMATS:
        return FLOAT_FORMATS[dtype]
    name = _LEGACY.get(name, name)
    if name not in BANK_FORMATS:
        raise ValueError(f"expert bank format {name!r} is not one of {', '.join(BANK_FORMATS)}")
    return name


@dataclass
class ExpertBank:
    fmt: str  # one of BANK_FORMATS: "bf16" | "f16" | "f32" | "fp8_e4m3" | "mxfp4" | "nvfp4" | "int4_*"
    num_experts: int  # E per layer
    hidden: int  # H
    inter: int  # I
    act: str  # "swiglu" | "gptoss"
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    fp8_block: int = 0  # column group of the scales: B1 for fp8, G for int4_*
    global_scale: tuple[float, float] = (1.0, 1.0)  # nvfp4: (w13, w2) global scales
    # mixed K-quant banks: the (w13, w2) format of each MoE layer (empty: ``fmt`` throughout)
    layer_fmts: tuple[tuple[str, str], ...] = ()
    compact: bool = False  # mixed banks: each layer's rows gapless at the start of its region
    _kernel_views: dict | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.fmt not in BANK_FORMATS:
            raise ValueError(
                f"expert bank format {self.fmt!r} is not one of {', '.join(BANK_FORMATS)}"
            )
        for pair in self.layer_fmts:
            if len(pair) != 2 or any(f not in KQUANT_FORMATS for f in pair):
                raise ValueError(
                    f"layer_fmts {pair!r}: a mixed bank's layers take (w13, w2) formats of "
                    f"{', '.join(KQUANT_FORMATS)}"
                )
        self.layer_fmts = tuple(tuple(p) for p in self.layer_fmts)

    def kind_fmt(self, which: str, layer: int = 0) -> str:
        """The format of ``which`` ("w13" / "w2") in MoE layer ``layer``."""
        if self.layer_fmts:
            return self.layer_fmts[layer][0 if which == "w13" else 1]
        return self.fmt

    @property
    def num_ids(self) -> int:
        return self.tensors[self._main()].shape[0]

    def _main(self) -> str:
        return {
            "mxfp4": "w13_blocks",
            "mxfp4_x16": "w13_blocks",
            "int4_sym_x16": "w13_q",
            "int8_sym_x16": "w13_q",
            "nvfp4": "w13_q",
            "int4_sym": "w13_q",
            "int4_asym": "w13_q",
            "int8_sym": "w13_q",
            **{k: "w13_q" for k in KQUANT_FORMATS},
        }.get(self.fmt, "w13")

    def nbytes_per_id(self) -> int:
        """Bytes of one expert's weights (mixed banks: averaged over the layers, padding excluded)."""
        if not self.layer_fmts:
            return sum(t[0].numel() * t.element_size() for t in self.tensors.values())
        per_layer = [
            sum(self.layer_view(w, m)[0].numel() for w in ("w13", "w2"))
            for m in range(len(self.layer_fmts))
        ]
        other = sum(t[0].numel() * t.element_size() for k, t in self.tensors.items()
                    if k not in ("w13_q", "w2_q"))  # fmt: skip
        return other + sum(per_layer) // len(per_layer)

    def layer_view(self, which: str, layer: int) -> torch.Tensor:
        """A K-quant bank's ``which`` ("w13" / "w2") rows of MoE layer ``layer`` as a uint8
        [N, rows, row bytes] view of its tensor, valid for that layer's flat ids (the tensor itself
        unless ``compact``; padded rows come whole: the kernels read only a row's blocks)."""
        t = self.tensors[f"{which}_q"]
        if not self.compact:
            return t
        cols = self.hidden if which == "w13" else self.inter
        fmt = self.kind_fmt(which, layer).removesuffix("_x16")  # interleaving keeps the bytes
        return compact_view(
            t, layer, self.num_experts, cols // kquants.QK * kquants.BLOCK_BYTES[fmt]
        )

    def padded(self) -> ExpertBank:
        """This bank with padded rows, the padding zero (a copy when ``compact``), as FTW stores it."""
        if not self.compact:
            return self
        tensors = dict(self.tensors)
        E = self.num_experts
        for which in ("w13", "w2"):
            out = torch.zeros_like(self.tensors[f"{which}_q"])
            for m in range(len(self.layer_fmts)):
                rows, view = slice(m * E, (m + 1) * E), self.layer_view(which, m)
                out[rows, :, : view.shape[2]] = view[rows]
            tensors[f"{which}_q"] = out
        return dataclasses.replace(self, tensors=tensors, compact=False, _kernel_views=None)

    def dequant(self, ids: torch.Tensor, which: str) -> torch.Tensor:
        """Float32 weights of ``which`` ("w13" [n, 2I, H] or "w2" [n, H, I]) for flat ``ids`` [n]."""
        if self.fmt in FLOAT_FORMATS.values():
            return self.tensors[which][ids].float()
        from ft_kernels.reference import dequantize  # the kernels' own reference twin

        if self.layer_fmts:  # each layer's ids in its own format
            layer = ids // self.num_experts
            rows, cols = (
                (2 * self.inter, self.hidden) if which == "w13" else (self.hidden, self.inter)
            )
            out = torch.empty(ids.numel(), rows, cols)
            for m in torch.unique(layer).tolist():
                sel = (layer == m).nonzero().flatten()
                w = self.kernel_weights(m)[0 if which == "w13" else 1]
                out[sel] = dequantize(dataclasses.replace(w, q=w.q[ids[sel]], bias=None))
            return out
        w = self.kernel_weights()[0 if which == "w13" else 1]
        scale, zero = (None if t is None else t[ids] for t in (w.scale, w.zero))
        return dequantize(dataclasses.replace(w, q=w.q[ids], scale=scale, zero=zero, bias=None))

    def interleave(self, fmts: tuple[str, ...]) -> int:
        """Repack, in place, every matrix kind (per MoE layer in mixed banks) in one of ``fmts`` ("q4_k", "q5_k",
        "q6_k", "q3_k", "mxfp4", "int4_sym", "int8_sym", "fp8_e4m3") whose rows come in whole groups of 16 into that
        format's ``_x16`` layout (``ft_kernels.to_x16_``: the same bytes, 16 rows interleaved), the layout of the
        kernels with rows in the lanes; the formats say so from then on. A bank in a format with scales of its
        own (mxfp4, int4_sym, int8_sym, fp8_e4m3) is repacked whole (codes and scales of both kinds) or not at
        all. Returns the number of (layer, kind) matrices repacked. The values do not
        change (``dequant``)."""
        if self.fmt in ("mxfp4", "int4_sym", "int8_sym", "fp8_e4m3"):
            return self._interleave_scaled() if self.fmt in fmts else 0
        n_layers = max(1, len(self.layer_fmts))
        fmts_at = [
            list(self.layer_fmts[m]) if self.layer_fmts else [self.fmt] * 2 for m in range(n_layers)
        ]
        done = 0
        for k, (which, rows, cols) in enumerate(
            (("w13", 2 * self.inter, self.hidden), ("w2", self.hidden, self.inter))
        ):
            if rows % 16 or cols % kquants.QK:
                continue
            if f"{which}_q" not in self.tensors:
                continue
            for m in range(n_layers):
                base = fmts_at[m][k]
                if base not in fmts:
                    continue
                q = self.layer_view(which, m)
                ids = (
                    range(m * self.num_experts, (m + 1) * self.num_experts)
                    if self.layer_fmts
                    else range(q.shape[0])
                )
                # in place, a matrix a thread
                ft_kernels.to_x16_(q[ids.start : ids.stop], cols, base)
                fmts_at[m][k] = f"{base}_x16"
                done += 1
        if done:
            if self.layer_fmts:
                self.layer_fmts = tuple(tuple(p) for p in fmts_at)
            # one kind repacked: the bank becomes mixed (its formats per layer)
            elif fmts_at[0][0] != fmts_at[0][1]:
                self.layer_fmts = tuple(
                    tuple(fmts_at[0]) for _ in range(self.num_ids // self.num_experts)
                )
            self.fmt = fmts_at[0][0]
            self._kernel_views = None
        return done

    def _interleave_scaled(self) -> int:
        kinds = (("w13", 2 * self.inter, self.hidden), ("w2", self.hidden, self.inter))
        if any(rows % 16 or cols % 32 for _, rows, cols in kinds):
            return 0
        mx = self.fmt == "mxfp4"
        if not mx and self.fp8_block % 32:  # the kernel's blocks of 32 columns share one scale
            return 0
        fp8 = self.fmt == "fp8_e4m3"
        for which, rows, cols in kinds:
            q = self.tensors[f"{which}_blocks" if mx else which if fp8 else f"{which}_q"]
            s = self.tensors[f"{which}_scales" if mx else f"{which}_scale"]
            row_bytes = cols if self.fmt in ("int8_sym", "fp8_e4m3") else cols // 2
            q = q.view(torch.uint8).view(q.shape[0], rows, row_bytes)
            ft_kernels.to_x16_(q, cols, self.fmt, s)  # in place
            # fp32 scales in f16 where exact (GGUF's own): fewer bytes a token
            self.tensors[f"{which}_scales" if mx else f"{which}_scale"] = scales_f16(s)
        self.fmt, self._kernel_views = f"{self.fmt}_x16", None
        return 2

    def bias(self, which: str) -> torch.Tensor | None:
        return self.tensors.get(f"{which}_bias")

    def kernel_weights(self, layer: int = 0):
        """(w13, w2) as ``ft_kernels.ExpertWeights`` views of this bank (no copies) in MoE layer ``layer``'s
        formats (the same for every layer but in mixed banks), or None when the stored format has no CPU
        kernel (float32 banks run on the torch backend). Cached."""
        if self._kernel_views is None:
            self._kernel_views = {}
        key = layer if self.layer_fmts else 0
        if key not in self._kernel_views:
            self._kernel_views[key] = self._make_kernel_views(key) or ()
        return self._kernel_views[key] or None

    def _make_kernel_views(self, layer: int):
        from ft_kernels import ExpertWeights

        t = self.tensors
        out = []
        for which, cols in (("w13", self.hidden), ("w2", self.inter)):
            bias = t.get(f"{which}_bias")
            fmt = self.kind_fmt(which, layer)
            if fmt in KQUANT_FORMATS:
                out.append(
                    ExpertWeights(fmt, self.layer_view(which, layer), cols, group=256, bias=bias)
                )
            elif self.fmt in ("mxfp4", "mxfp4_x16"):
                blocks = t[f"{which}_blocks"]
                q = blocks.view(blocks.shape[0], blocks.shape[1], -1)
                out.append(
                    ExpertWeights(self.fmt, q, cols, t[f"{which}_scales"], group=32, bias=bias)
                )
            elif self.fmt in ("fp8_e4m3", "fp8_e4m3_x16"):
                q = t[which].view(torch.uint8)
                out.append(
                    ExpertWeights(
                        self.fmt, q, cols, t[f"{which}_scale"], group=self.fp8_block, bias=bias
                    )
                )
            elif self.fmt in (
                "nvfp4",
                "int4_sym",
                "int4_asym",
                "int8_sym",
                "int4_sym_x16",
                "int8_sym_x16",
            ):
                group = 16 if self.fmt == "nvfp4" else self.fp8_block
                gs = self.global_scale[0 if which == "w13" else 1]
                out.append(
                    ExpertWeights(
                        self.fmt,
                        t[f"{which}_q"],
                        cols,
                        t[f"{which}_scale"],
                        t.get(f"{which}_zero"),
                        group=group,
                        global_scale=gs,
                        bias=bias,
                    )
                )
            elif self.fmt in ("bf16", "f16"):
                out.append(ExpertWeights(self.fmt, t[which], cols, bias=bias))
            else:
                return None
        return tuple(out)


def compact_view(t: torch.Tensor, layer: int, num_experts: int, row_bytes: int) -> torch.Tensor:
    """The [N, rows, B] uint8 tensor ``t`` seen as [N, rows, row_bytes] (row_bytes <= B) such that
    the flat ids of MoE layer ``layer`` (``num_experts`` a layer) address that layer's rows gapless
    from the start of its [E, rows, B] region: the view starts ``layer * E * rows * (B - row_bytes)``
    bytes in, and its last flat id still ends inside ``t``."""
    N, rows, B = t.shape
    skip = layer * num_experts * rows * (B - row_bytes)
    size, stride = (N, rows, row_bytes), (rows * row_bytes, row_bytes, 1)
    return t.as_strided(size, stride, t.storage_offset() + skip)
