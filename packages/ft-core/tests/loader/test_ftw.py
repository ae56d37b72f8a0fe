"""FTW: converted checkpoints load to the same engine as the Hugging Face directory.

Unconverted formats (bf16, fp8 block-scaled, mxfp4) give bit-identical logits and bank bytes.
Quantised conversions write exactly ``ft_kernels.quantize`` of the whole bank (one call, computed
here independently of the converter's chunking), and the FTW engine's logits equal those of the HF
engine with that quantised bank swapped in (same kernels, same bytes); the C++ kernels agree with
the torch reference on the loaded bank, and the logits stay near the unquantised model's.
"""

import dataclasses
import json
import logging

import pytest
import torch

import ft_kernels
from ft_core import Engine, SamplingParams
from ft_core.loader.ftw_format import ALIGN, INDEX_NAME
from ft_core.loader.ftw_write import convert

import tiny_checkpoints
from bounds import assert_logits_close

IDS = [(i * 37 + 11) % 500 + 3 for i in range(48)]
SHARD = 1 << 16  # small shards: many files, bank rows split across them
KERNEL_FMT = {
    "fp8": ("fp8_e4m3", 128),
    "mxfp4": ("mxfp4", 32),
    "nvfp4": ("nvfp4", 16),
    "int4": ("int4_sym", 128),
    "int4_asym": ("int4_asym", 128),
    "bf16": ("bf16", 0),
}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    made = {}

    def get(arch, variant=None):
        if (arch, variant) not in made:
            name = f"{arch}-{variant}"
            made[arch, variant] = tiny_checkpoints.make_checkpoint(
                arch, tmp_path_factory.mktemp(name) / name, variant
            )
        return made[arch, variant]

    return get


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


@pytest.mark.parametrize(
    "arch,variant",
    [
        ("qwen3_moe", None),
        ("qwen3_moe", "sharded"),
        ("qwen2_moe", None),
        ("mixtral", None),
        ("deepseek_v3", "fp8"),
        ("gpt_oss", None),
        ("gpt_oss", "mxfp4"),
        ("qwen3_next", None),
        ("qwen3_5_moe", "fused"),
    ],
)
def test_unconverted_formats_are_bit_identical(ckpt, tmp_path, arch, variant):
    src = ckpt(arch, variant)
    r = convert(src, tmp_path / "ftw", shard_bytes=SHARD)
    hf, ftw = Engine.from_pretrained(src), Engine.from_pretrained(tmp_path / "ftw")
    assert torch.equal(hf.score(IDS), ftw.score(IDS))
    a, b = hf.model.bank, ftw.model.bank
    assert (a.fmt, a.fp8_block, sorted(a.tensors)) == (b.fmt, b.fp8_block, sorted(b.tensors)) and r[
        "bank_fmt"
    ] == a.fmt
    for k in a.tensors:
        assert torch.equal(_bytes(a.tensors[k]), _bytes(b.tensors[k])), k
        assert b.tensors[k].data_ptr() % ALIGN == 0
    # The HF path also counts the expert biases (read with r.tensor) as dense bytes; FTW does not.
    biases = sum(t.numel() * t.element_size() for k, t in a.tensors.items() if k.endswith("_bias"))
    assert hf.model.weight_bytes_per_token() - ftw.model.weight_bytes_per_token() == biases
    assert hf.eos_ids == ftw.eos_ids and hf.tokenizer.encode("hello world") == ftw.tokenizer.encode(
        "hello world"
    )
    g = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    assert hf.generate(IDS[:9], g)[0].token_ids == ftw.generate(IDS[:9], g)[0].token_ids


def test_index_layout_and_copied_files(ckpt, tmp_path):
    src = ckpt("qwen3_moe")
    out = tmp_path / "ftw"
    convert(src, out, shard_bytes=SHARD)
    index = json.loads((out / INDEX_NAME).read_text())
    assert index["format"] == "ftw" and index["version"] == 1 and index["alignment"] == ALIGN
    for t in index["tensors"]:
        assert set(t) >= {"name", "kind", "shape", "dtype", "file", "offset", "bytes", "checksum"}
        assert t["offset"] % ALIGN == 0 and t["kind"] in ("dense", "bank")
    for s in index["shards"]:
        size = (out / s["file"]).stat().st_size
        alone = [t for t in index["tensors"] if t["file"] == s["file"]]
        assert size == s["bytes"] and (size <= SHARD or len(alone) == 1)
    bank = index["bank"]
    assert bank["num_ids"] == 2 * 8 and bank["tensors"] == ["w13", "w2"]
    for name in (
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        assert (out / name).read_bytes() == (src / name).read_bytes()
    assert not list(out.glob("*.safetensors")) and not (out / "convert.pid").exists()


def _whole_bank_quantized(bank, fmt):
    """ft_kernels.quantize over every flat id at once (the reference for the converter's chunks)."""
    kfmt, group = KERNEL_FMT[fmt]
    ids = torch.arange(bank.num_ids)
    return [
        ft_kernels.quantize(bank.dequant(ids, which), kfmt, group or None)
        for which in ("w13", "w2")
    ]


@pytest.mark.parametrize(
    "arch,variant,fmt,tol",
    [
        ("gpt_oss", None, "fp8", 0.1),
        ("gpt_oss", None, "mxfp4", 0.35),
        ("gpt_oss", None, "nvfp4", 0.35),
        ("gpt_oss", None, "int4", 0.35),
        ("gpt_oss", None, "int4_asym", 0.35),
        ("qwen3_moe", None, "fp8", 0.1),
        ("qwen3_moe", None, "int4", 0.35),
        ("gpt_oss", "mxfp4", "nvfp4", 0.35),
        ("deepseek_v3", "fp8", "bf16", 0.05),
    ],
)
def test_quantised_conversion_is_what_the_kernels_read(ckpt, tmp_path, arch, variant, fmt, tol):
    src = ckpt(arch, variant)
    convert(src, tmp_path / "ftw", fmt, shard_bytes=SHARD)
    hf, ftw = Engine.from_pretrained(src), Engine.from_pretrained(tmp_path / "ftw")
    assert ftw.model.backend.name == "kernel"
    want = _whole_bank_quantized(hf.model.bank, fmt)
    for w, got in zip(want, ftw.model.bank.kernel_weights()):
        assert (got.fmt, got.group if got.fmt != "bf16" else 0, got.global_scale) == (
            w.fmt,
            w.group,
            w.global_scale,
        )
        for f in ("q", "scale", "zero"):
            a, b = getattr(w, f), getattr(got, f)
            assert (a is None) == (b is None) and (
                a is None or torch.equal(_bytes(a), _bytes(b))
            ), f
    exact = ftw.score(IDS)
    unquantised = hf.score(IDS)
    for f in dataclasses.fields(
        ftw.model.bank
    ):  # the HF engine, its bank swapped for the quantised one
        setattr(hf.model.bank, f.name, getattr(ftw.model.bank, f.name))
    hf.model.bank._kernel_views = None
    assert torch.equal(hf.score(IDS), exact)
    ref = Engine.from_pretrained(tmp_path / "ftw", expert_impl="torch").score(IDS)
    assert_logits_close(exact, ref, ftw.model_config)
    assert ((exact - unquantised).norm() / unquantised.norm()).item() < tol


def test_nvfp4_bank_through_the_expert_cache(ckpt, tmp_path):
    """The slot bank carries the nvfp4 global scales: cache policies give the plain host result."""
    convert(ckpt("gpt_oss"), tmp_path / "ftw", "nvfp4")
    eng = Engine.from_pretrained(tmp_path / "ftw")
    plain = eng.score(IDS)
    cached = Engine.from_pretrained(
        tmp_path / "ftw", moe_backend="fill", moe_cache_fraction=0.25
    ).score(IDS)
    assert_logits_close(cached, plain, eng.model_config)


def test_huge_page_buffers_load_the_same(ckpt, tmp_path, monkeypatch):
    from ft_core.loader import ftw_io

    src = ckpt("qwen3_moe")
    convert(src, tmp_path / "ftw")
    monkeypatch.setenv("FT_LOAD_HUGEPAGES", "1")
    monkeypatch.setattr(ftw_io, "HUGE_MIN", 1)  # every non-empty buffer its own huge-page mapping
    eng = Engine.from_pretrained(tmp_path / "ftw")
    assert all(t.data_ptr() % ALIGN == 0 for t in eng.model.bank.tensors.values())
    assert torch.equal(eng.score(IDS), Engine.from_pretrained(src).score(IDS))


def test_load_logs_gbps_and_reports_io(ckpt, tmp_path, caplog):
    convert(ckpt("qwen3_moe"), tmp_path / "ftw")
    with caplog.at_level(logging.INFO, logger="ft_core.loader"):
        Engine.from_pretrained(tmp_path / "ftw")
    assert any("GB/s" in r.getMessage() and "direct IO" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("failure", ["open", "read"])
def test_buffered_fallback_without_direct_io(ckpt, tmp_path, monkeypatch, failure):
    """File systems that refuse O_DIRECT at open (tmpfs on older kernels) or at the first read (EINVAL)."""
    import errno
    import os

    from ft_core.loader import ftw_io

    src = ckpt("qwen3_moe")
    convert(src, tmp_path / "ftw", shard_bytes=SHARD)
    real_open, real_preadv, direct_fds = os.open, os.preadv, set()

    def fake_open(path, flags, *a):
        if flags & os.O_DIRECT:
            if failure == "open":
                raise OSError(errno.EINVAL, "Invalid argument")
            fd = real_open(path, flags, *a)
            direct_fds.add(fd)
            return fd
        return real_open(path, flags, *a)

    def fake_preadv(fd, bufs, off):
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_preadv(fd, bufs, off)

    monkeypatch.setattr(ftw_io.os, "open", fake_open)
    monkeypatch.setattr(ftw_io.os, "preadv", fake_preadv)
    from ft_core.loader.ftw_read import open_ftw

    eng = Engine.from_pretrained(tmp_path / "ftw")
    reader = open_ftw(tmp_path / "ftw", torch.float32, eng.model_config)
    assert reader.stats["direct_bytes"] == 0 and reader.stats["bytes"] > 0
    monkeypatch.undo()
    assert torch.equal(eng.score(IDS), Engine.from_pretrained(src).score(IDS))


@pytest.mark.parametrize(
    "arch,variant,fmt,old",
    [
        ("qwen3_moe", None, "auto", "dense"),
        ("qwen3_moe", "fp8", "auto", "fp8"),
        ("qwen3_moe", None, "int4", "int4_sym"),
    ],
)
def test_indexes_with_the_old_bank_names_still_load(ckpt, tmp_path, arch, variant, fmt, old):
    """FTW indexes written before ExpertBank took the kernels' format names say "dense" (bf16/f16/f32 banks) or
    "fp8": they load as the same bank under the new name, with the same logits."""
    out = tmp_path / "ftw"
    convert(ckpt(arch, variant), out, fmt, shard_bytes=SHARD)
    new = Engine.from_pretrained(out)
    index = json.loads((out / INDEX_NAME).read_text())
    assert index["bank"]["fmt"] == new.model.bank.fmt in ft_kernels.FORMATS
    index["bank"]["fmt"] = old
    (out / INDEX_NAME).write_text(json.dumps(index))
    again = Engine.from_pretrained(out)
    assert again.model.bank.fmt == new.model.bank.fmt
    assert torch.equal(again.score(IDS), new.score(IDS))
    index["bank"]["fmt"] = "int3"
    (out / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(Exception, match="invalid bank record.*'int3' is not one of"):
        Engine.from_pretrained(out)
