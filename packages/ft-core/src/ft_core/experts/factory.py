"""The expert backend a model's MoE layers run on, built from the EngineConfig: the host backend alone
(``moe_backend`` "cpu"), or an ExpertCache of device slots with a CachedBackend over a device and a host
backend. Policy lives here; the model definition only asks for one (DESIGN §3, §8.4)."""

from __future__ import annotations

import logging

import ft_kernels
from ft_kernels import FORMATS
from ft_kernels.formats import REPACKED
from ft_kernels.reference import INT8_FORMATS

from ft_core.config import EngineConfig
from ft_core.device import for_name
from ft_core.errors import FTError
from ft_core.experts.backends import ExpertBackend, select_impl
from ft_core.experts.bank import ExpertBank
from ft_core.experts.cache import ExpertCache
from ft_core.experts.cached import CachedBackend
from ft_core.experts.probe import probe
from ft_core.experts.timing import auto_policy, slots_for_free_memory
from ft_core.model_config import MoEConfig


def cache_slots(bank: ExpertBank, engine: EngineConfig, free_bytes: int | None = None) -> int:
    """Device slots of the expert cache: ``moe_cache_slots``, else ``moe_cache_bytes`` over one expert's bytes,
    else ``moe_cache_fraction`` of every expert, else -- on a GPU, ``free_bytes`` being its free memory
    now -- whole slots in 90 % of it after a reserve of 1 GiB + 10 % (activations, the allocator's
    slack), else one half of every expert."""
    if engine.moe_cache_slots:
        return engine.moe_cache_slots
    if engine.moe_cache_bytes:
        slots = engine.moe_cache_bytes // bank.nbytes_per_id()
        if slots < 1:
            raise FTError(
                f"moe_cache_bytes={engine.moe_cache_bytes} holds no expert ({bank.nbytes_per_id()} bytes each)"
            )
        return slots
    if engine.moe_cache_fraction is None and free_bytes is not None:
        reserve = (1 << 30) + free_bytes // 10
        slots = slots_for_free_memory(free_bytes, bank.nbytes_per_id(), bank.num_ids, reserve)
        if slots < 1:
            raise FTError(
                f"the GPU has {free_bytes / 2**30:.1f} GiB free: no room for one expert "
                f"({bank.nbytes_per_id()} bytes) after a {reserve / 2**30:.1f} GiB reserve; "
                "set --moe-cache-size or use --device cpu"
            )
        return slots
    return max(1, round(bank.num_ids * (engine.moe_cache_fraction or 0.5)))


def fp32_products_hint(bank: ExpertBank, engine: EngineConfig) -> str | None:
    """A hint, when the CPU kernels will multiply this bank's 4-bit / K-quant weights with exact fp32
    products on an x86 CPU without AVX-512 BF16 (8 or 16 products an instruction: compute-bound, 1.3-2x below
    the integer path), that ``int8_activations`` is the fast path there; else None. A bfloat16 engine's
    16-bit products (``ft_kernels.bf16_i16``: the K-quants, INT4 in groups of 32, and the formats whose ``_x16``
    layout has them: MXFP4, INT4 in any group of 32s) get none."""
    if engine.int8_activations or ft_kernels.active_isa() not in ("avx2", "avx512"):
        return None
    group = bank.fp8_block if bank.fmt.startswith("int4") else 32
    fp32 = {
        f
        for f in {bank.fmt} | {f for pair in bank.layer_fmts for f in pair}
        if f in INT8_FORMATS
        and not (
            engine.dtype == "bfloat16"
            and any(
                g in FORMATS and ft_kernels.bf16_i16(g, 256, group)
                for g in (f, f + "_x16")  # or its rows-in-lanes layout (x16_formats)
            )
        )
    }
    if not fp32:
        return None
    return (
        f"this CPU runs {'/'.join(sorted(fp32))} experts with exact fp32 products "
        f"({ft_kernels.active_isa()}, no AVX-512 BF16), which is compute-bound; --int8-activations "
        "(int8 activations, llama.cpp's CPU scheme, not exact) runs them up to ~2x faster"
    )


def x16_formats(engine: EngineConfig) -> tuple[str, ...]:
    """The formats ("q4_k", "q5_k", "q6_k", "q3_k", "mxfp4", "int4_sym", "int8_sym", "fp8_e4m3") that ``engine``'s CPU kernels
    read faster 16 rows interleaved (their ``_x16`` layouts: rows in the lanes). With int8 activations, of the
    formats they apply to (``reference.INT8_FORMATS``), those with an int8 rows-in-lanes kernel (q4_k, q5_k,
    q6_k, q3_k, mxfp4, int4_sym on AVX2, AVX-VNNI and AVX-512 VNNI); with bf16 ones (and for the formats int8 activations leave alone)
    those the bf16 kernels run (AMD's AVX-512 BF16: all eight, on Zen 5 but q4_k, q3_k and int8_sym; Intel's: mxfp4, int8_sym, fp8_e4m3), or the 16-bit
    ones where there is no bf16 kernel (AVX2, AVX-512 without BF16, Intel's AVX-512 BF16, Zen 5 for those three: q4_k, int4_sym, mxfp4
    and int8_sym; with AVX-VNNI or AVX-512 VNNI also q5_k and q3_k, and with AVX-VNNI in AVX2 code q6_k; unless
    FT_BF16_I16=0). Elsewhere (fp32 activations) none: the row-wise layout stays."""

    def simd(f: str) -> bool:
        if engine.int8_activations and f in INT8_FORMATS:
            return ft_kernels.int8_simd(f)
        return engine.dtype == "bfloat16" and (
            ft_kernels.bf16_simd(f) or ft_kernels.bf16_i16(f, 256)
        )

    return tuple(f.removesuffix("_x16") for f in REPACKED if simd(f))


def build_backend(
    bank: ExpertBank, moe: MoEConfig, engine: EngineConfig, n_moe_layers: int
) -> ExpertBackend:
    """The backend for ``bank`` (every MoE layer's experts, flat ids) under ``engine``'s policy."""
    if (hint := fp32_products_hint(bank, engine)) is not None:
        logging.getLogger("ft_core.engine").warning(hint)
    if engine.expert_impl in ("auto", "kernel") and (fmts := x16_formats(engine)):
        # Q4_K / Q6_K / MXFP4 / INT4 / INT8 / FP8 experts in the rows-in-lanes kernels' layout
        bank.interleave(fmts)
    host = select_impl(
        engine.expert_impl, bank, moe.swiglu_alpha, moe.swiglu_limit, engine.int8_activations
    )
    policy, ratio = engine.resolved_moe_backend, engine.moe_bandwidth_ratio
    if policy == "cpu":
        return host
    dev = for_name(engine.device)
    free = dev.mem_get_info()[0] if dev.name != "cpu" else None
    slots = cache_slots(bank, engine, free)
    if (
        engine.moe_backend == "auto"
    ):  # on a device: the fastest split on this machine's measurements
        rec = probe(bank.fmt if bank.fmt in FORMATS else "bf16", dev.name)  # cached per machine
        policy, ratio, _ = auto_policy(rec, bank.nbytes_per_id(), moe.top_k, slots / bank.num_ids)
        if policy == "cpu":
            dev.close()
            return host
    control = engine.cache_control_impl
    if control == "auto":
        control = "torch" if dev.name == "cpu" else "triton"
    cache = ExpertCache(bank, slots, dev.name, engine.moe_cache_policy, control)
    impl = engine.device_expert_impl
    if impl == "auto":
        gpu_ok = bank.fmt in ("bf16", "f16")  # what the Triton grouped GEMM reads
        impl = engine.expert_impl if dev.name == "cpu" else ("triton" if gpu_ok else "torch")
    device = select_impl(impl, cache.slot_bank(), moe.swiglu_alpha, moe.swiglu_limit)
    return CachedBackend(
        cache,
        policy,
        ratio,
        device,
        host,
        warmup_calls=n_moe_layers,
        overlap=engine.moe_prefill_overlap,
        device=dev,
        graphs=engine.cuda_graphs,
        join=engine.cpu_join,
    )
