"""ft kernels: CPU expert kernels (nanobind C++) with a torch reference twin for each.

Importing this package first sets OMP_WAIT_POLICY=PASSIVE unless the environment has a value (OpenMP reads it
once, when torch loads it): torch's OpenMP workers then sleep after each op instead of spinning, so in a prefill,
where torch's ops and the kernel pool's calls alternate, they no longer take the pool's cores. 48-layer
Qwen3-30B-A3B-shaped model (Q4_0 / Q3_K_M GGUF), 2 threads on a 2-core Zen 4: prefill of 128 tokens 54 -> 60-64
/ 45-50 -> 63 tok/s, 512 tokens 59 -> 62-65, decode 19 -> 20. A process that loads torch before ft keeps
OpenMP's default."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (see above)

from ft_kernels import reference  # noqa: E402
from ft_kernels.cpu import (
    active_isa,
    available_isas,
    decode_attention,
    decode_attention_bf16,
    gdn_decode,
    gdn_prefill,
    bf16_i16,
    bf16_tiles,
    bf16_simd,
    int8_simd,
    linear,
    moe_experts,
    moe_swiglu,
    num_threads,
    prefill_attention,
    prefill_attention_simd,
    rms_norm,
    rope,
    route_topk,
    set_num_threads,
    set_spin_us,
    sigmoid_mul,
    split_blocks,
    silu_mul,
    to_x16_,
    x16_prefetch,
)
from ft_kernels.decode_layer import DecodeLayer
from ft_kernels.decode_stack import DecodeStack
from ft_kernels.formats import FORMATS, ExpertWeights, quantize
from ft_kernels.host_branch import HostBranch

__all__ = [
    "DecodeLayer",
    "DecodeStack",
    "HostBranch",
    "active_isa",
    "available_isas",
    "decode_attention",
    "decode_attention_bf16",
    "gdn_decode",
    "gdn_prefill",
    "bf16_i16",
    "bf16_tiles",
    "bf16_simd",
    "int8_simd",
    "linear",
    "moe_experts",
    "moe_swiglu",
    "num_threads",
    "prefill_attention",
    "prefill_attention_simd",
    "rms_norm",
    "rope",
    "route_topk",
    "set_num_threads",
    "set_spin_us",
    "sigmoid_mul",
    "split_blocks",
    "silu_mul",
    "to_x16_",
    "reference",
    "FORMATS",
    "ExpertWeights",
    "quantize",
    "x16_prefetch",
]
__version__ = "0.1.0"
