"""EngineConfig's options are defined once: each field carries its type, choices (one Literal), default, help and
flag; ``options()`` describes them for the command line, and __post_init__ checks choices from the same Literals."""

import dataclasses

import ft_kernels
from ft_kernels.formats import REPACKED
import pytest
from ft_core import FTError
from ft_core.config import (
    DeviceExpertImpl,
    EngineConfig,
    ExpertImpl,
    KernelFormat,
    MoeCachePolicy,
    options,
)
from ft_core.experts.backends import IMPLS
from ft_core.experts.bank import BANK_FORMATS
from ft_core.experts.cache import POLICIES
from typing import get_args


def test_every_field_is_an_option_with_help_and_a_flag():
    names = [f.name for f in dataclasses.fields(EngineConfig)]
    opts = options()
    assert [o.name for o in opts] == names
    flags = [o.flag for o in opts]
    assert len(set(flags)) == len(flags) and all(f.startswith("--") for f in flags)
    for o in opts:
        assert o.help and o.kind in (str, int, float, bool), o
        if (
            o.kind is bool and not o.optional
        ):  # a flag flips the default: a True default needs a --no- flag
            assert o.flag.startswith("--no-") == bool(o.default), o
        if o.choices is not None and o.default is not None:
            assert o.default in o.choices, o


def test_one_format_vocabulary():
    """dense_format's Literal is the kernels' format list, spelled once in each package and checked here; the
    cache policies' Literal is ExpertCache's list."""
    chosen = tuple(f for f in ft_kernels.FORMATS if f not in REPACKED)  # not the load-time layouts
    assert tuple(get_args(KernelFormat)) == chosen
    assert tuple(get_args(MoeCachePolicy)) == POLICIES
    assert BANK_FORMATS == (
        *ft_kernels.FORMATS,
        "f32",
    )  # expert banks: the kernels' names, plus f32


def test_one_implementation_vocabulary():
    """expert_impl / device_expert_impl name the registered implementations (plus auto); moe_backend is the
    hierarchy's policy and names none of them."""
    assert set(get_args(DeviceExpertImpl)) == {"auto", *IMPLS}
    assert set(get_args(ExpertImpl)) <= set(get_args(DeviceExpertImpl))


@pytest.mark.parametrize("name", [o.name for o in options() if o.choices])
def test_choices_are_checked_from_the_literal(name):
    with pytest.raises(
        FTError,
        match=f"{name} 'nope' is not one of {', '.join(next(o for o in options() if o.name == name).choices)}",
    ):
        EngineConfig(model="x", **{name: "nope"})


def test_optional_choice_may_be_none():
    assert EngineConfig(model="x", dense_format=None).dense_format is None


def test_device_names_and_a_missing_gpu_are_refused():
    import torch

    from ft_core.config import EngineConfig

    with pytest.raises(FTError, match="device 'tpu' is not one of cpu, cuda, cuda:N"):
        EngineConfig(model=None, device="tpu")
    with pytest.raises(FTError, match="device 'cuda0' is not one of"):
        EngineConfig(model=None, device="cuda0")
    cpu = EngineConfig(model=None)
    assert cpu.resolved_moe_backend == "cpu" and cpu.dense_device == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(FTError, match=r"torch sees no CUDA device .* use device 'cpu'"):
            EngineConfig(model=None, device="cuda:1")
    else:
        assert EngineConfig(model=None, device="cuda").resolved_moe_backend == "fill"
