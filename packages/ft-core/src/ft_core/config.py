"""EngineConfig: the one frozen configuration passed down from Engine.from_pretrained."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ft_core.errors import FTError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class EngineConfig:
    model: str  # checkpoint directory
    device: str = "cpu"
    dtype: str = "float32"  # activations and dense weights: float32 | bfloat16 | float16
    expert_impl: str = "auto"  # auto | kernel (ft_kernels C++) | torch (reference)
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    page_size: int = 16
    kv_cache_bytes: int = 1 << 30  # KV pool budget (host memory on CPU)
    max_batch_tokens: int = 2048  # tokens per step: every running decode, then prefill chunks
    prefix_cache: bool = True  # reuse the KV pages of cached prefixes (radix tree over token ids)
    # Hybrid models (linear-attention layers, DESIGN §4): live recurrent states and prefix state checkpoints.
    state_slots: int = 16  # sequences admitted at once (one live recurrent state each)
    state_checkpoints: int | None = None  # checkpoint budget in slots (one slot = the state of every state layer;
    # None: ``default_checkpoint_slots``) ...
    state_checkpoint_bytes: int | None = None  # ... or in bytes (whole slots that fit); separate from the KV pool
    checkpoint_policy: str = "anchors"  # anchors | every_n | llama | none (cache/anchors.py)
    checkpoint_interval: int = 1024  # every_n spacing; anchors: fallback spacing inside long blocks
    checkpoints_per_prompt: int = 2  # snapshots taken while prefilling one prompt, the latest anchors first
    # Sliding-window layers (GPT-OSS): keep only the last W tokens as per-sequence state, checkpointed like
    # recurrent state (True), or paged KV of every token (False). None: auto, True when the model mixes
    # windowed and full-attention layers.
    window_state: bool | None = None
    # Gated DeltaNet layers: auto (flash-linear-attention's Triton kernels on CUDA when installed, else torch)
    # | torch (layers/gated_delta.py) | fla (layers/gated_delta_fla.py; FTError when it cannot run).
    linear_attn_impl: str = "auto"
    # Expert memory hierarchy (DESIGN §3). "cpu": every expert on the host kernels, no cache (the
    # default without an accelerator); "fill" / "hybrid" / "static": an ExpertCache of slots on the
    # device (with device="cpu", a separate host memory region, which runs the whole hierarchy for tests).
    moe_backend: str = "auto"  # auto | cpu | fill | hybrid | static
    moe_cache_slots: int | None = None  # cache size in slots (one slot = every bank row of one expert)
    moe_cache_fraction: float | None = None  # or as a fraction of all experts (default 0.5)
    moe_cache_bytes: int | None = None  # or as a byte budget (whole slots that fit)
    moe_bandwidth_ratio: float | None = None  # B_P / B_H for "hybrid" (until the bandwidth probe lands)
    moe_prefill_overlap: bool = True  # prefill: load layer l+1's experts while layer l computes
    device_expert_impl: str = "auto"  # routes on cache slots: auto (= expert_impl on device="cpu") | triton | kernel | torch
    record_routing: str | None = None  # write every forward's routed expert ids to this JSON-lines file
    # Dense projections (attention, dense / shared-expert MLPs, LM head) re-quantised at load to this kernel
    # format (models/dense_quant.py): int4_sym | int4_asym | mxfp4 | nvfp4 | fp8_e4m3 | bf16 | f16; None keeps them.
    dense_format: str | None = None
    # Opt-in, not exact: int8 activations (q8_0: per 32 columns, scale max|x| / 127) into the integer dot
    # products of 4-bit expert banks and 4-bit dense projections (ft_kernels.reference.quantize_act_int8).
    int8_activations: bool = False

    def __post_init__(self):
        if self.dtype not in _DTYPES:
            raise FTError(f"dtype {self.dtype!r} is not one of {', '.join(_DTYPES)}")
        if self.device != "cpu":
            raise FTError(
                f"device {self.device!r}: this build runs on 'cpu' only; GPU execution arrives with the expert cache"
            )
        if self.dense_format is not None:
            import ft_kernels

            if self.dense_format not in ft_kernels.FORMATS:
                raise FTError(f"dense_format {self.dense_format!r} is not one of {', '.join(ft_kernels.FORMATS)}")
        if self.int8_activations and self.resolved_moe_backend != "cpu":
            raise FTError(f"int8_activations runs on the CPU kernels only; moe_backend {self.moe_backend!r} would "
                          "give experts on the cache different numerics from the misses (use moe_backend cpu)")
        if self.page_size < 1 or self.max_batch_tokens < 1:
            raise FTError("page_size and max_batch_tokens must be >= 1")
        if self.state_slots < 1 or (self.state_checkpoints or 0) < 0 or self.checkpoint_interval < 1:
            raise FTError("state_slots and checkpoint_interval must be >= 1, state_checkpoints >= 0")
        if self.checkpoint_policy not in ("anchors", "every_n", "llama", "none"):
            raise FTError(f"checkpoint_policy {self.checkpoint_policy!r} is not one of anchors, every_n, llama, none")
        if self.linear_attn_impl not in ("auto", "torch", "fla"):
            raise FTError(f"linear_attn_impl {self.linear_attn_impl!r} is not one of auto, torch, fla")
        if self.moe_backend not in ("auto", "cpu", "fill", "hybrid", "static"):
            raise FTError(f"moe_backend {self.moe_backend!r} is not one of auto, cpu, fill, hybrid, static")
        if self.moe_cache_fraction is not None and not 0 < self.moe_cache_fraction <= 1:
            raise FTError(f"moe_cache_fraction={self.moe_cache_fraction} must be in (0, 1]")
        if self.moe_cache_bytes is not None and self.moe_cache_bytes < 1:
            raise FTError(f"moe_cache_bytes={self.moe_cache_bytes} must be >= 1")
        if self.moe_cache_slots is not None and self.moe_cache_slots < 1:
            raise FTError(f"moe_cache_slots={self.moe_cache_slots} must be >= 1")
        if self.resolved_moe_backend == "hybrid" and not (self.moe_bandwidth_ratio or 0) > 0:
            raise FTError("moe_backend 'hybrid' needs moe_bandwidth_ratio = B_P / B_H > 0")

    def checkpoint_slots(self, bytes_per_slot: int) -> int:
        """The checkpoint budget in slots: ``state_checkpoint_bytes`` (whole slots), else ``state_checkpoints``,
        else 32 slots, or more when slots are small (GPT-OSS windows: ~3 MB): as many as fit in 256 MiB, at
        most 256 (Qwen3-Next-80B: 74 MiB a slot, 32 slots)."""
        if self.state_checkpoint_bytes is not None:
            return self.state_checkpoint_bytes // bytes_per_slot
        if self.state_checkpoints is not None:
            return self.state_checkpoints
        return max(32, min(256, (256 << 20) // bytes_per_slot))

    @property
    def resolved_moe_backend(self) -> str:
        """"auto" is "cpu" on a machine without an accelerator (the only kind this build runs on)."""
        return "cpu" if self.moe_backend == "auto" else self.moe_backend

    @property
    def resolved_linear_attn_impl(self) -> str:
        """"torch" or "fla". "auto" is "fla" on CUDA when flash-linear-attention imports (asked only there:
        importing it takes seconds); "fla" raises FTError when it is missing or cannot run on the device."""
        from ft_core import fla_check

        if self.linear_attn_impl == "fla":
            fla_check.require_fla(self.device)
            return "fla"
        on_cuda = self.device.startswith("cuda")
        if self.linear_attn_impl == "auto" and on_cuda and fla_check.fla_available():
            return "fla"
        return "torch"

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]
