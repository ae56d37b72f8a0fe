"""GGUF's K-quant blocks (q4_k, q5_k, q6_k): the torch decoder against llama.cpp's own Python decoder
(``gguf.quants.dequantize``, an independent implementation) on arbitrary valid blocks, bit for bit; the
quantiser's blocks decode within its stated error; bad shapes are refused with the limit named.
The kernels themselves are checked against this decoder in test_linear.py / test_moe_experts.py."""

import ft_kernels as fk
import gguf
import numpy as np
import pytest
import torch
from ft_kernels import kquants

GGML = {
    "q4_k": gguf.GGMLQuantizationType.Q4_K,
    "q5_k": gguf.GGMLQuantizationType.Q5_K,
    "q6_k": gguf.GGMLQuantizationType.Q6_K,
}
F16_AT = {"q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}  # byte offsets of the f16 fields


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


@pytest.mark.parametrize("fmt", list(GGML))
def test_kernel_on_arbitrary_blocks(fmt):
    """The kernel reads any valid block (not only the quantiser's): every scale, min and code value."""
    b = random_blocks(fmt, 6 * 3, seed=7).reshape(6, 3 * kquants.BLOCK_BYTES[fmt])
    w = fk.ExpertWeights(fmt, b[None], 3 * kquants.QK, group=kquants.QK)
    x = torch.randn(5, 3 * kquants.QK, generator=torch.Generator().manual_seed(1))
    W = kquants.dequantize(b, fmt, 3 * kquants.QK).double()
    exact = x.double() @ W.T
    bound = (
        768 * 2.0**-24 / (1 - 768 * 2.0**-24) * (x.double().abs() @ W.abs().T)
        + 2.0**-24 * exact.abs()
    )
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
