"""Rewrites of a saved checkpoint's tensors into the layouts real hub checkpoints use.

- fused experts (Qwen3.5-style): ``mlp.experts.gate_up_proj [E, 2I, H]`` (gate rows first) and
  ``mlp.experts.down_proj [E, H, I]`` instead of per-expert Linear weights;
- FP8 block quantisation (DeepSeek-V3 / Qwen3-FP8): ``weight`` as float8_e4m3fn plus an fp32
  ``weight_scale_inv [ceil(out/B0), ceil(in/B1)]``, ``W = fp8 * scale_inv[i // B0, j // B1]``;
- MXFP4 (gpt-oss): ``*_blocks uint8 [E, out, in/32, 16]`` (two e2m1 codes a byte, low nibble
  first) and ``*_scales uint8 [E, out, in/32]`` (e8m0, ``2^(s-127)``).
Each quantiser has the exact fp32 dequantiser beside it; the references are built from those.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

FP8_MAX = 448.0  # largest finite float8_e4m3fn
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # code & 7; bit 3 is the sign


# --------------------------------------------------------------------------------------- files


def read_tensors(ckpt: Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory (one file or index-sharded)."""
    out: dict[str, torch.Tensor] = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def write_tensors(ckpt: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Replace the checkpoint's weights by one ``model.safetensors``."""
    for f in list(ckpt.glob("*.safetensors")) + list(ckpt.glob("*.safetensors.index.json")):
        f.unlink()
    save_file(
        {k: v.contiguous() for k, v in sorted(tensors.items())},
        ckpt / "model.safetensors",
        {"format": "pt"},
    )


def update_config(ckpt: Path, **fields) -> None:
    path = ckpt / "config.json"
    cfg = json.loads(path.read_text())
    for k, v in fields.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


# ------------------------------------------------------------------------------- fused experts

_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


def fuse_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert ``experts.{e}.{gate,up,down}_proj.weight`` -> ``experts.gate_up_proj`` / ``experts.down_proj``."""
    out, groups = {}, {}
    for name, t in tensors.items():
        if m := _EXPERT.match(name):
            groups.setdefault(m[1], {})[(int(m[2]), m[3])] = t
        else:
            out[name] = t
    for prefix, g in groups.items():
        n = 1 + max(e for e, _ in g)
        out[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([g[e, "gate"], g[e, "up"]]) for e in range(n)]
        )
        out[f"{prefix}.down_proj"] = torch.stack([g[e, "down"] for e in range(n)])
    return out


# ------------------------------------------------------------------------------------- FP8 block


def fp8_quantize(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """[O, I] weight -> (float8_e4m3fn [O, I], fp32 scale_inv [ceil(O/B0), ceil(I/B1)]), absmax/448 per block."""
    (o, i), (b0, b1) = w.shape, block
    ro, ri = -(-o // b0), -(-i // b1)
    padded = torch.zeros(ro * b0, ri * b1)
    padded[:o, :i] = w.float()
    blocks = padded.view(ro, b0, ri, b1)
    scale = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-12)
    q = (blocks / scale[:, None, :, None]).view(ro * b0, ri * b1)[:o, :i]
    return q.to(torch.float8_e4m3fn), scale


def fp8_dequantize(
    q: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]
) -> torch.Tensor:
    """Exact fp32 ``W[i, j] = q[i, j] * scale_inv[i // B0, j // B1]``."""
    o, i = q.shape
    s = scale_inv.float().repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)
    return q.float() * s[:o, :i]


def is_fp8_target(name: str, t: torch.Tensor) -> bool:
    """Linear weights of attention, dense MLP, shared and routed experts; not norms, router, embeddings."""
    if t.dim() != 2 or not name.endswith(".weight") or name.endswith(".mlp.gate.weight"):
        return False
    return ".self_attn." in name or ".mlp." in name


def fp8_quantize_all(
    tensors: dict[str, torch.Tensor], block: tuple[int, int]
) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in tensors.items():
        if is_fp8_target(name, t):
            out[name], out[name + "_scale_inv"] = fp8_quantize(t, block)
        else:
            out[name] = t
    return out


def fp8_dequantize_all(
    tensors: dict[str, torch.Tensor], block: tuple[int, int]
) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in tensors.items():
        if name.endswith("_scale_inv"):
            continue
        out[name] = (
            fp8_dequantize(t, tensors[name + "_scale_inv"], block)
            if t.dtype == torch.float8_e4m3fn
            else t
        )
    return out


# ----------------------------------------------------------------------------------------- MXFP4


def mxfp4_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., out, in] -> (blocks uint8 [..., out, in/32, 16], scales uint8 [..., out, in/32]).

    The e8m0 scale of a 32-block is the smallest power of two with absmax / scale <= 6; each value
    is rounded to the nearest e2m1 magnitude (ties to the lower code), sign in bit 3.
    """
    *lead, o, i = w.shape
    assert i % 32 == 0, f"MXFP4 needs the input dimension ({i}) to be a multiple of 32"
    x = w.float().reshape(*lead, o, i // 32, 32)
    amax = x.abs().amax(dim=-1)
    exp = torch.where(amax > 0, torch.ceil(torch.log2(amax / 6.0)), torch.zeros_like(amax)).clamp(
        -127, 127
    )
    v = x / torch.exp2(exp)[..., None]
    code = (v.abs()[..., None] - E2M1).abs().argmin(dim=-1).to(torch.uint8)  # nearest magnitude
    code |= (v < 0).to(torch.uint8) << 3
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)  # element 2k in the low nibble
    return blocks.contiguous(), (exp + 127).to(torch.uint8)


def mxfp4_dequantize(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Exact fp32 inverse of ``mxfp4_quantize``: [..., out, in/32, 16] -> [..., out, in]."""
    lut = torch.cat([E2M1, -E2M1])
    codes = torch.stack([blocks & 0xF, blocks >> 4], dim=-1).reshape(*blocks.shape[:-1], 32).long()
    vals = lut[codes] * torch.exp2(scales.float() - 127)[..., None]
    return vals.reshape(*vals.shape[:-2], -1)


def mxfp4_quantize_gpt_oss(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """gpt-oss fused experts (stored ``[E, in, out]``) -> ``{proj}_blocks`` / ``{proj}_scales`` of ``[E, out, in]``."""
    out = {}
    for name, t in tensors.items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            out[name + "_blocks"], out[name + "_scales"] = mxfp4_quantize(t.transpose(1, 2))
        else:
            out[name] = t
    return out


def mxfp4_dequantize_gpt_oss(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inverse of ``mxfp4_quantize_gpt_oss`` (fp32 experts in the in-memory ``[E, in, out]`` layout)."""
    out = {}
    for name, t in tensors.items():
        if name.endswith("_scales"):
            continue
        if name.endswith("_blocks"):
            base = name.removesuffix("_blocks")
            out[base] = mxfp4_dequantize(t, tensors[base + "_scales"]).transpose(1, 2).contiguous()
        else:
            out[name] = t
    return out
