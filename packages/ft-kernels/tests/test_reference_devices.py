"""The torch twins run where their inputs are: on a GPU the cache's slot banks of formats without a
Triton kernel (MXFP4, FP8, ...) are dequantised by ``reference.dequantize`` on the device. A constant
table kept on the host (e2m1's) failed there ("indices should be either on cpu or on the same device")
on an H200; torch's ``meta`` device (shapes only) raises the same device errors on a CPU, so this
test finds such constants in CI."""

import dataclasses

import pytest
import torch

import ft_kernels
from ft_kernels import reference
from ft_kernels.formats import REPACKED

META = torch.device("meta")
FORMATS = [f for f in ft_kernels.FORMATS if f not in REPACKED]


def _on(w, device):
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return dataclasses.replace(w, q=move(w.q), scale=move(w.scale), zero=move(w.zero))


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_runs_on_the_weights_device(fmt):
    torch.manual_seed(0)
    group = 256 if fmt in ("q4_k", "q5_k", "q6_k", "q3_k", "q2_k") else None
    w = ft_kernels.quantize(torch.randn(2, 16, 256), fmt, group)
    out = reference.dequantize(_on(w, META))
    assert out.device == META and out.shape == (2, 16, 256)
