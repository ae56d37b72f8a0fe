"""ft kernels: CPU expert kernels (nanobind C++) with a torch reference twin for each."""

from ft_kernels import reference
from ft_kernels.cpu import (
    active_isa,
    available_isas,
    decode_attention,
    gdn_decode,
    bf16_i16,
    bf16_simd,
    int8_simd,
    linear,
    moe_experts,
    moe_swiglu,
    num_threads,
    rms_norm,
    rope,
    route_topk,
    set_num_threads,
    set_spin_us,
    sigmoid_mul,
    silu_mul,
    to_x16_,
)
from ft_kernels.decode_layer import DecodeLayer
from ft_kernels.formats import FORMATS, ExpertWeights, quantize

__all__ = [
    "DecodeLayer",
    "active_isa",
    "available_isas",
    "decode_attention",
    "gdn_decode",
    "bf16_i16",
    "bf16_simd",
    "int8_simd",
    "linear",
    "moe_experts",
    "moe_swiglu",
    "num_threads",
    "rms_norm",
    "rope",
    "route_topk",
    "set_num_threads",
    "set_spin_us",
    "sigmoid_mul",
    "silu_mul",
    "to_x16_",
    "reference",
    "FORMATS",
    "ExpertWeights",
    "quantize",
]
__version__ = "0.1.0"
