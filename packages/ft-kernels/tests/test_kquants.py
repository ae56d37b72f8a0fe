"""GGUF's K-quant blocks (q4_k, q5_k, q6_k, q3_k, q2_k): the torch decoder against llama.cpp's own Python decoder
(``gguf.quants.dequantize``, an independent implementation) on arbitrary valid blocks, bit for bit; the
quantiser's blocks decode within its stated error; bad shapes are refused with the limit named.
The kernels themselves are checked against this decoder in test_linear.py / test_moe_experts.py."""

import ft_kernels as fk
import gguf
import numpy as np
import pytest
import torch
from ft_kernels import kquants
from fp32_bounds import linear_bound

GGML = {
    "q4_k": gguf.GGMLQuantizationType.Q4_K,
    "q5_k": gguf.GGMLQuantizationType.Q5_K,
    "q6_k": gguf.GGMLQuantizationType.Q6_K,
    "q3_k": gguf.GGMLQuantizationType.Q3_K,
    "q2_k": gguf.GGMLQuantizationType.Q2_K,
}
F16_AT = kquants.F16_AT  # byte offsets of the f16 fields


def random_blocks(fmt: str, n: int, seed: int) -> torch.Tensor:
    """n arbitrary blocks: every byte random except the f16 fields, kept finite (sign and exponent < 30)."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randint(0, 256, (n, kquants.BLOCK_BYTES[fmt]), generator=g, dtype=torch.uint8)
    for o in F16_AT[fmt]:
        b[:, o + 1] = (b[:, o + 1] & 0x03) | (torch.randint(0, 30, (n,), generator=g) << 2).to(
            torch.uint8
        )
    return b


@pytest.mark.parametrize("fmt", list(GGML))
def test_decoder_equals_llamacpp_python(fmt):
    b = random_blocks(fmt, 64, seed=len(fmt))
    ours = kquants.dequantize(b, fmt, kquants.QK)
    theirs = gguf.quants.dequantize(b.numpy(), GGML[fmt])
    assert np.array_equal(ours.numpy(), theirs)


@pytest.mark.parametrize("T", [1, 2, 5, 8, 20, 29])
@pytest.mark.parametrize("xdtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", list(GGML))
def test_kernel_on_arbitrary_blocks(fmt, xdtype, T):
    """The kernel reads any valid block (not only the quantiser's): every scale, min and code value. 9 rows: a
    tile of 8 and a single one (one token: AVX2 / AVX-512's Q4_K and Q5_K in tiles of 2 rows and one tail row;
    AVX2's Q3_K from 3 tokens on its decode-pass kernel). The SIMD kernels sum the scaled codes and the mins
    (Q6_K, Q3_K: the code offset) apart, so the bound is over the split terms (``fp32_bounds.kquant_terms``): with x in fp32 on AVX2
    and AVX-512 (kquant_nib.h), with x in bf16 on AVX-512 BF16 row-wise at 5 tokens, tokens in the lanes at 8
    (8 lanes), 20 (16, then 4 row-wise) and 29 (16, then 13 in 16 lanes)."""
    b = random_blocks(fmt, 9 * 3, seed=7).reshape(9, 3 * kquants.BLOCK_BYTES[fmt])
    w = fk.ExpertWeights(fmt, b[None], 3 * kquants.QK, group=kquants.QK)
    x = torch.randn(T, 3 * kquants.QK, generator=torch.Generator().manual_seed(T)).to(xdtype)
    exact, bound = linear_bound(x, w, split_terms=True, q3k_offset=True)
    assert ((fk.linear(x, w).double() - exact).abs() <= bound).all()


@pytest.mark.parametrize("fmt", list(GGML))
def test_bad_shapes_are_refused(fmt):
    with pytest.raises(ValueError, match="256"):
        kquants.quantize(torch.randn(2, 100), fmt)
    w = fk.quantize(torch.randn(1, 4, 256), fmt)
    with pytest.raises(ValueError, match="super-blocks of 256"):
        fk.linear(torch.randn(1, 128), fk.ExpertWeights(fmt, w.q[..., : w.q.shape[-1] // 2], 128))
    with pytest.raises(ValueError, match="bytes"):
        fk.linear(torch.randn(1, 512), fk.ExpertWeights(fmt, w.q, 512))
