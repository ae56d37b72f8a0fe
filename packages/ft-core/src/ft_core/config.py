"""EngineConfig: the one frozen configuration passed down from Engine.from_pretrained."""

from __future__ import annotations

import functools
import re
from dataclasses import MISSING, dataclass, field, fields
from types import UnionType
from typing import Literal, Union, get_args, get_origin, get_type_hints

import torch

from ft_core.errors import FTError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# One Literal per option with a fixed set of values: the CLI's choices and __post_init__'s checks read them.
Dtype = Literal["float32", "bfloat16", "float16"]
ExpertImpl = Literal["auto", "kernel", "torch"]
DeviceExpertImpl = Literal["auto", "triton", "kernel", "torch"]
CheckpointPolicy = Literal["anchors", "every_n", "llama", "none"]
LinearAttnImpl = Literal["auto", "torch", "fla"]
MoeBackend = Literal["auto", "cpu", "fill", "hybrid", "static"]
CacheControlImpl = Literal["auto", "torch", "triton"]
CpuJoin = Literal["host", "callback", "flag"]
MoeCachePolicy = Literal[
    "lru", "reuse", "nextuse"
]  # = ft_core.experts.cache.POLICIES (a test checks)
KernelFormat = Literal[
    "bf16",
    "f16",
    "fp8_e4m3",
    "mxfp4",
    "nvfp4",
    "int4_sym",
    "int4_asym",
    "int8_sym",
    "q4_k",
    "q5_k",
    "q6_k",
    "q3_k",
    "q2_k",
]  # = ft_kernels.FORMATS but the load-time layouts (formats.REPACKED); a test checks


def option(
    default=MISSING,
    *,
    help: str,
    flag: str | None = None,
    units: str | None = None,
    metavar: str | None = None,
):
    """An EngineConfig field with what its command-line flag needs: ``help``; ``flag`` when it is not
    ``--field-name`` (a True-by-default bool's flag turns it off); ``units`` "bytes" (the flag takes sizes such
    as 4GiB); ``metavar``."""
    meta = {"help": help, "flag": flag, "units": units, "metavar": metavar}
    return field(metadata=meta) if default is MISSING else field(default=default, metadata=meta)


@dataclass(frozen=True)
class EngineConfig:
    model: str = option(
        help="checkpoint directory (Hugging Face layout or FTW), a GGUF file (split: its first part), "
        "ollama:NAME[:TAG] or lmstudio:NAME; default: the built-in demo model"
    )
    device: str = option(
        "cpu",
        help="cpu (default) or cuda / cuda:N: with a GPU, dense weights, KV pages, recurrent states and "
        "the expert cache's slots live on it; every expert stays in host memory (the source of truth), "
        "misses copied to the GPU or computed by the CPU kernels (--moe-backend)",
    )
    dtype: Dtype = option("float32", help="activations and dense weights (default: float32)")
    expert_impl: ExpertImpl = option(
        "auto",
        help="how routed experts run: ft_kernels C++ where supported (auto), always C++ (kernel), torch reference",
    )
    max_model_len: int | None = option(None, help="context limit in tokens (default: the model's)")
    page_size: int = option(16, help="tokens per KV page (default: 16)")
    kv_cache_bytes: int = option(
        1 << 30,
        flag="--kv-cache-size",
        units="bytes",
        help="KV page pool, host memory on the CPU, resident as its pages fill (e.g. 4GiB; default 1GiB)",
    )
    max_batch_tokens: int = option(
        2048, help="tokens per step: every running decode, then prefill chunks (default: 2048)"
    )
    prefix_cache: bool = option(
        True,
        flag="--no-prefix-cache",
        help="do not share KV pages / states between requests (radix tree over token ids)",
    )
    # Hybrid models (linear-attention layers, DESIGN §4): live recurrent states and prefix state checkpoints.
    state_slots: int = option(
        16,
        help="models with state layers (hybrids, GPT-OSS windows): sequences running at "
        "once, one live state slot each (default 16)",
    )
    state_checkpoints: int | None = option(
        None,
        help="models with state layers: prefix state checkpoint budget in slots (default 32, or as many small "
        "slots as fit in 256 MiB, up to 256; see checkpoint_slots)",
    )
    state_checkpoint_bytes: int | None = option(
        None,
        flag="--state-checkpoint-size",
        units="bytes",
        help="... or in bytes (whole slots that fit; e.g. 2GiB); apart from the KV pool",
    )
    checkpoint_policy: CheckpointPolicy = option(
        "anchors",
        help="models with state layers: where state checkpoints go (cache/anchors.py; default: anchors = "
        "think/tool/turn/prompt ends)",
    )
    checkpoint_interval: int = option(
        1024,
        help="every_n spacing of state checkpoints; anchors: the fallback spacing "
        "inside long blocks (default: 1024)",
    )
    checkpoints_per_prompt: int = option(
        2,
        help="state snapshots taken while prefilling one prompt, the latest anchors "
        "first (default: 2)",
    )
    window_state: bool | None = option(
        None,
        help="sliding-window layers (GPT-OSS): keep only the last W tokens per sequence as state, checkpointed "
        "like recurrent state (on), or paged KV of every token (off); auto: on for models mixing windowed "
        "and full attention",
    )
    linear_attn_impl: LinearAttnImpl = option(
        "auto",
        help="hybrid models: Gated DeltaNet layers through flash-linear-attention's Triton kernels (fla; pip "
        "install 'ft-core[fla]', CUDA only) or torch (layers/gated_delta.py); auto: fla on CUDA when installed",
    )
    # Expert memory hierarchy (DESIGN §3). moe_backend is the hierarchy's policy (the name is the CLI's contract);
    # expert_impl / device_expert_impl name the implementations that compute routes (experts/backends.py IMPLS).
    moe_backend: MoeBackend = option(
        "auto",
        help="expert hierarchy policy: cpu (every expert on the host kernels; auto picks it without a GPU), "
        "fill / hybrid / static (an expert cache of slots on the device; with --device cpu a separate "
        "memory region, which runs the whole hierarchy for tests)",
    )
    moe_cache_policy: MoeCachePolicy = option(
        "nextuse",
        help="which cached experts make room for misses: nextuse (default: the one least likely to be "
        "routed in its layer's next 2-3 visits, from moving averages of how often it is routed and how "
        "often again right after; a miss less likely to be needed than its victim runs on the CPU "
        "instead), reuse (the one whose next use is expected last) or lru (least recently used); "
        "experts/cache.py",
    )
    moe_cache_slots: int | None = option(
        None, help="expert cache size in slots (one slot = every bank row of one expert)"
    )
    moe_cache_fraction: float | None = option(
        None, help="expert cache size as a fraction of all experts (default 0.5)"
    )
    moe_cache_bytes: int | None = option(
        None,
        flag="--moe-cache-size",
        units="bytes",
        help="expert cache size in bytes (whole slots that fit)",
    )
    moe_bandwidth_ratio: float | None = option(None, help="B_P / B_H for --moe-backend hybrid")
    moe_prefill_overlap: bool = option(
        True,
        flag="--no-moe-prefill-overlap",
        help="prefill: do not load layer l+1's experts while layer l computes",
    )
    cuda_graphs: bool = option(
        True,
        flag="--no-cuda-graphs",
        help="decode-sized MoE layer steps on a GPU: launch their device work (cache control, fills, "
        "slot GEMM) kernel by kernel instead of replaying it from captured CUDA graphs "
        "(experts/captured.py; the same result, bit for bit)",
    )
    cpu_join: CpuJoin = option(
        "host",
        help="decode-sized MoE layer steps on a GPU with routes left to the CPU: how that share joins "
        "the device's work. host: the host waits for the cache step's outcome and runs the CPU routes "
        "itself; callback: a host function queued in the stream (cudaLaunchHostFunc) runs them in C++, "
        "the host never waits; flag: the device raises a flag in page-locked memory that a C++ thread "
        "polls, and waits on the device for its answer (experts/joined.py; the same result, bit for bit)",
    )
    decode_graphs: bool = option(
        False,
        help="replay each decode step of up to 32 sequences (buckets 1, 2, 4, 8, 16, 32) from one captured "
        "CUDA graph: embedding, every layer and the LM head in one launch instead of hundreds from Python "
        "(decode_graph.py). Needs full, gated, latent (MLA) or Gated DeltaNet attention and, with an expert "
        "cache, --cpu-join callback or flag; elsewhere decode stays eager, with a warning saying why. Opt-in "
        "until checked on a GPU; on --device cpu the stand-in runs each step again (for tests)",
    )
    decode_plans: bool = option(
        True,
        flag="--no-decode-plans",
        help="decode steps: run each decoder layer op by op from Python instead of as one C++ call "
        "(models/decode_plan.py; the same result, bit for bit)",
    )
    cache_control_impl: CacheControlImpl = option(
        "auto",
        help="the expert cache's per-layer control step (lookup, victims, copy list): torch "
        "(experts/cache.py) or triton (its twin, one kernel on the device, no host sync inside); "
        "auto: triton on CUDA, torch on the CPU",
    )
    device_expert_impl: DeviceExpertImpl = option(
        "auto",
        help="routes on cache slots: auto (= expert_impl with --device cpu; triton for bf16 / f16 "
        "slots on CUDA, else torch) | triton | kernel | torch",
    )
    record_routing: str | None = option(
        None,
        metavar="FILE",
        help="append every forward's routed expert ids to FILE "
        "(JSON lines; see bench_cache_policies.py)",
    )
    dense_format: KernelFormat | None = option(
        None,
        help="re-quantise the dense projections (attention, dense and shared-expert MLPs, LM head) at load to "
        "this kernel format (models/dense_quant.py), as llama.cpp's quantised files do (default: keep them "
        "as stored)",
    )
    int8_activations: bool = option(
        False,
        help="opt-in, not exact: int8 activations (q8_0, per 32 columns, scale max|x| / 127) into the integer "
        "dot products of 4-bit and K-quant (Q4_K, Q5_K, Q6_K) experts and dense projections, as llama.cpp's "
        "CPU path does (1.3-2x faster K-quant products on CPUs without AVX-512 BF16; with AVX-512 VNNI, Q4_K "
        "weights repacked at load for a rows-in-lanes kernel, ~1.4x; error ~0.5% of a product's size)",
    )

    def __post_init__(self):
        for o in options():
            v = getattr(self, o.name)
            if o.choices is not None and not (v is None and o.optional) and v not in o.choices:
                raise FTError(f"{o.name} {v!r} is not one of {', '.join(o.choices)}")
        if not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise FTError(f"device {self.device!r} is not one of cpu, cuda, cuda:N")
        if self.device != "cpu" and not torch.cuda.is_available():
            raise FTError(
                f"device {self.device!r}: torch sees no CUDA device (torch.cuda.is_available() is "
                "False); use device 'cpu'"
            )
        if self.dense_format is not None and self.dense_device != "cpu":
            raise FTError(
                f"dense_format {self.dense_format!r} is a CPU-kernel format; with device "
                f"{self.device!r} dense weights live on the GPU in dtype {self.dtype}"
            )
        if self.int8_activations and self.resolved_moe_backend != "cpu":
            raise FTError(
                f"int8_activations runs on the CPU kernels only; moe_backend {self.moe_backend!r} would "
                "give experts on the cache different numerics from the misses (use moe_backend cpu)"
            )
        if self.page_size < 1 or self.max_batch_tokens < 1:
            raise FTError("page_size and max_batch_tokens must be >= 1")
        if (
            self.state_slots < 1
            or (self.state_checkpoints or 0) < 0
            or self.checkpoint_interval < 1
        ):
            raise FTError(
                "state_slots and checkpoint_interval must be >= 1, state_checkpoints >= 0"
            )
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
        """ "auto" is "cpu" with device "cpu", "fill" (every miss copied to the GPU) with a CUDA device."""
        if self.moe_backend != "auto":
            return self.moe_backend
        return "cpu" if self.device == "cpu" else "fill"

    @property
    def dense_device(self) -> str:
        """Where dense weights, activations, KV pages and recurrent states live: ``device``."""
        return self.device

    @property
    def resolved_linear_attn_impl(self) -> str:
        """ "torch" or "fla". "auto" is "fla" on CUDA when flash-linear-attention imports (asked only there:
        importing it takes seconds); "fla" raises FTError when it is missing or cannot run on the device."""
        from ft_core import fla_check

        if self.linear_attn_impl == "fla":
            fla_check.require_fla(self.dense_device)
            return "fla"
        on_cuda = self.dense_device.startswith("cuda")
        if self.linear_attn_impl == "auto" and on_cuda and fla_check.fla_available():
            return "fla"
        return "torch"

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]


@dataclass(frozen=True)
class Option:
    """One EngineConfig field as a command line sees it (``options()``)."""

    name: str
    kind: type  # str, int, float or bool
    optional: bool  # None is a value (the field's "auto" / "as stored" / "the model's")
    choices: tuple[str, ...] | None  # the field's Literal values
    default: object
    help: str
    flag: str  # --field-name unless the field names another
    units: str | None  # "bytes": sizes such as 4GiB
    metavar: str | None


def _option(f, hint) -> Option:
    union = get_origin(hint) in (Union, UnionType)
    base = next(a for a in get_args(hint) if a is not type(None)) if union else hint
    choices = tuple(get_args(base)) if get_origin(base) is Literal else None
    m = f.metadata
    return Option(
        f.name,
        str if choices else base,
        union and type(None) in get_args(hint),
        choices,
        None if f.default is MISSING else f.default,
        m["help"],
        m["flag"] or "--" + f.name.replace("_", "-"),
        m["units"],
        m["metavar"],
    )


@functools.cache
def options() -> tuple[Option, ...]:
    """Every EngineConfig field with its type, choices, default, help, flag and units, in field order: what
    ``ft serve`` / ``ft generate`` derive their engine flags from (ft_serve/cli_args.py)."""
    hints = get_type_hints(EngineConfig)
    return tuple(_option(f, hints[f.name]) for f in fields(EngineConfig))
