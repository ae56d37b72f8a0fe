"""The start-up hint that int8 activations are the fast path for 4-bit / K-quant experts on x86 CPUs without
AVX-512 BF16 (experts/factory.py: fp32_products_hint), in fresh processes on each ISA this CPU has."""

import os
import subprocess
import sys

import ft_kernels
import pytest

CODE = """
import ft_kernels
from ft_core.config import EngineConfig
from ft_core.experts.bank import ExpertBank
from ft_core.experts.factory import fp32_products_hint
assert ft_kernels.active_isa() == {isa!r}
def hint(fmt, int8=False, layer_fmts=(), dtype="float32"):
    bank = ExpertBank(fmt, 4, 256, 256, "swiglu", layer_fmts=layer_fmts)
    return fp32_products_hint(bank, EngineConfig(model="m", int8_activations=int8, dtype=dtype))
print(repr((hint("q4_k"), hint("bf16"), hint("q4_k", int8=True), hint("q4_k", layer_fmts=(("q4_k", "q6_k"),)),
            hint("q4_k", dtype="bfloat16"), hint("mxfp4", dtype="bfloat16"), hint("nvfp4", dtype="bfloat16"))))
"""


@pytest.mark.parametrize("isa", ft_kernels.available_isas())
def test_hint_only_where_products_run_in_fp32(isa):
    res = subprocess.run(
        [sys.executable, "-c", CODE.format(isa=isa)],
        env={**os.environ, "FT_CPU_ISA": isa},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    q4k, bf16, q4k_int8, mixed, q4k_bf16, mxfp4_bf16, nvfp4_bf16 = eval(res.stdout.strip())
    assert bf16 is None and q4k_int8 is None  # no 4-bit weights; or already on the integer path
    # a bfloat16 engine's K-quant and MXFP4 (in its _x16 layout) products are 16-bit there (ft_kernels.bf16_i16),
    # not fp32; NVFP4's stay fp32
    assert q4k_bf16 is None and mxfp4_bf16 is None
    if isa in ("avx2", "avx512"):
        assert "--int8-activations" in q4k and "q4_k" in q4k
        assert "q4_k/q6_k" in mixed
        assert "nvfp4" in nvfp4_bf16
    else:  # AVX-512 BF16 has exact bf16 kernels as fast; scalar / NEON have no integer SIMD kernel
        assert q4k is None and mixed is None and nvfp4_bf16 is None
