"""ft_kernels.split_blocks (GGML 32-element blocks -> heads and codes, 4-bit codes as the kernels' pairs) against
its twin ft_kernels.reference.split_blocks, bit for bit: Q4_0 (18 bytes, f16 head), MXFP4 (17, e8m0 head) and
Q8_0 (34, codes as stored), from no block to more than one pool task's chunk (16384 blocks). The twin's nibble
order is checked against GGML's own layout (element j < 16: low nibble of byte j; j >= 16: high nibble of byte
j - 16) and the pairs against the kernels' (element 2k low in byte k)."""

import ft_kernels as fk
import pytest
import torch
from ft_kernels import reference as R

LAYOUTS = [(18, 2, True), (17, 1, True), (34, 2, False)]  # Q4_0, MXFP4, Q8_0


@pytest.mark.parametrize("block_bytes,head,nibbles", LAYOUTS)
@pytest.mark.parametrize("shape", [(0,), (1,), (3, 7), (2, 9000)])
def test_equals_twin(block_bytes, head, nibbles, shape):
    g = torch.Generator().manual_seed(sum(shape) + block_bytes)
    b = torch.randint(0, 256, (*shape, block_bytes), dtype=torch.uint8, generator=g)
    q, h = fk.split_blocks(b, head, nibbles)
    wq, wh = R.split_blocks(b, head, nibbles)
    assert q.shape == (*shape, block_bytes - head) and h.shape == (*shape, head)
    assert torch.equal(q, wq) and torch.equal(h, wh)


def test_twin_reads_ggml_nibbles_into_the_kernels_pairs():
    codes = torch.randint(0, 16, (5, 32), dtype=torch.uint8)  # elements in order
    ggml = codes[:, :16] | (codes[:, 16:] << 4)  # GGML: j and j + 16 share byte j
    b = torch.cat([torch.full((5, 1), 127, dtype=torch.uint8), ggml], dim=1)
    q, h = R.split_blocks(b, 1, True)
    assert torch.equal(q & 0x0F, codes[:, 0::2]) and torch.equal(q >> 4, codes[:, 1::2])
    assert torch.equal(h, b[:, :1])
    assert torch.equal(fk.split_blocks(b, 1, True)[0], q)


@pytest.mark.parametrize(
    "head,nibbles,match", [(3, True, "16 bytes where nibbles"), (34, False, "head_bytes must")]
)
def test_bad_arguments_raise_naming_them(head, nibbles, match):
    with pytest.raises(ValueError, match=match):
        fk.split_blocks(torch.zeros(4, 34 if not nibbles else 18, dtype=torch.uint8), head, nibbles)
