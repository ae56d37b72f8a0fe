"""dense_format (dense projections re-quantised at load) and int8_activations through the Engine.

- dense_format: the engine equals the same model whose dense weights were replaced by the dequantised
  values of its QuantDense matrices (float32; only fp32 summation order differs: tests/bounds.py),
  and a decode token reads exactly the bytes those matrices hold.
- int8_activations (opt-in, not exact): on a model with MXFP4 experts and 4-bit dense weights the logits
  stay within 5 % of max |logit| of the exact-activation engine at the median position (a measurement of the tiny random model,
  not a bound: the kernels' bounds are in ft-kernels' test_int8_activations.py), and configurations that
  would mix numerics are refused.
"""

import pytest
import torch

from ft_core import Engine, FTError
from ft_core.layers.dense import QuantDense
from ft_kernels import reference as R

import tiny_checkpoints
from bounds import assert_logits_close

IDS = [(i * 37 + 11) % 500 + 3 for i in range(30)]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoints.make_checkpoint("gpt_oss", tmp_path_factory.mktemp("g") / "g", "mxfp4")


def _dequantise_into(plain: Engine, quant: Engine) -> int:
    """Copy quant's QuantDense matrices, dequantised, into the same attributes of plain; returns their bytes."""
    n = 0
    pairs = list(zip(plain.model.layers, quant.model.layers))
    for (_, pa, _, pm), (_, qa, _, qm) in pairs:
        for po, qo in (
            (pa, qa),
            (pm, qm),
            (getattr(pm, "shared", None), getattr(qm, "shared", None)),
        ):
            if qo is None:
                continue
            for name, v in vars(qo).items():
                if isinstance(v, QuantDense):
                    setattr(po, name, R.dequantize(v.w)[0].contiguous())
                    n += v.nbytes()
    if isinstance(quant.model.lm_head, QuantDense):
        plain.model.lm_head = R.dequantize(quant.model.lm_head.w)[0].contiguous()
        n += quant.model.lm_head.nbytes()
    return n


@pytest.mark.parametrize("fmt", ["int4_sym", "mxfp4", "fp8_e4m3"])
def test_dense_format_equals_dequantised_weights(ckpt, fmt):
    quant = Engine.from_pretrained(ckpt, dtype="float32", dense_format=fmt)
    plain = Engine.from_pretrained(ckpt, dtype="float32")
    before = plain.model.dense_bytes_per_token
    qbytes = _dequantise_into(plain, quant)
    assert qbytes > 0
    want, got = plain.score(IDS), quant.score(IDS)
    assert_logits_close(got, want, plain.model_config)
    # bytes per token: the replaced float32 matrices' bytes are gone, the quantised ones' are counted
    replaced = before - quant.model.dense_bytes_per_token + qbytes
    assert 0 < qbytes < replaced


def test_int8_activations_stay_close(ckpt):
    exact = Engine.from_pretrained(ckpt, dtype="float32", dense_format="int4_sym")
    q8 = Engine.from_pretrained(
        ckpt, dtype="float32", dense_format="int4_sym", int8_activations=True
    )
    a, b = exact.score(IDS), q8.score(IDS)
    assert not torch.equal(a, b)
    per_position = (a - b).abs().amax(-1) / a.abs().amax(
        -1
    )  # a routing near-tie can flip at a few positions
    assert per_position.median() <= 0.05  # measured 0.025 here


def test_refusals(ckpt):
    with pytest.raises(FTError, match="dense_format 'q4' is not one of"):
        Engine.from_pretrained(ckpt, dense_format="q4")
    with pytest.raises(FTError, match="int8_activations runs on the CPU kernels only"):
        Engine.from_pretrained(ckpt, int8_activations=True, moe_backend="fill")
    with pytest.raises(
        FTError, match="int8_activations runs on the C.. kernels; expert implementation 'torch'"
    ):
        Engine.from_pretrained(ckpt, int8_activations=True, expert_impl="torch")


@pytest.mark.parametrize("fmt", ["int8_sym", "q6_k", "mxfp4"])
def test_lm_head_rows_not_in_16s_are_padded_for_the_interleaved_kernel(fmt):
    """An LM head whose vocabulary is not a whole number of 16-row groups (gpt-2's 50257) is interleaved after
    zero rows (models/dense_quant.py: ``_interleaved(pad=True)``), and the result leaves them out: its rows
    equal those of the same matrix with its next rows real, bit for bit (rows in the lanes do not mix), and
    the padding rows cost no result column; layer projections are not padded."""
    import dataclasses

    import ft_kernels as fk

    from ft_core.layers.dense import linear
    from ft_core.models.dense_quant import _interleaved

    g = torch.Generator().manual_seed(0)
    K = 256
    w48 = fk.quantize(torch.randn(1, 48, K, generator=g) * 0.1, fmt, group=32)
    cut = lambda t: None if t is None else t[:, :37].contiguous()  # noqa: E731
    w37 = dataclasses.replace(w48, q=cut(w48.q), scale=cut(w48.scale), zero=cut(w48.zero))
    full = _interleaved(QuantDense(w48), (fmt,))
    head = _interleaved(QuantDense(w37), (fmt,), pad=True)
    assert full.w.fmt == head.w.fmt == f"{fmt}_x16" and head.w.rows == 48
    assert head.out_rows == 37 and head.shape == (37, K)
    assert _interleaved(QuantDense(w37), (fmt,)).w.fmt == fmt  # a projection keeps its rows
    x = torch.randn(3, K, generator=g).bfloat16()
    got, want = linear(x, head, dtype=torch.float32), linear(x, full, dtype=torch.float32)
    assert got.shape == (3, 37) and got.is_contiguous()
    assert torch.equal(got, want[:, :37])
