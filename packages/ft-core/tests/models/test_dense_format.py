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
