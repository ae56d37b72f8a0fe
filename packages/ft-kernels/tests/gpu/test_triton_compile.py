"""Every Triton kernel of ft_kernels.gpu compiles for a real GPU target (Hopper, sm_90) on a machine
without one: Triton's front end and ptxas run on the host. The interpreter (TRITON_INTERPRET=1), which
the parity tests use, accepts Python that the compiler refuses -- a module-level constant read inside
a kernel that is not declared ``tl.constexpr`` ran under the interpreter and failed to compile on an
H200 -- so this is what keeps the kernels buildable between GPU runs."""

import pytest
import triton  # a locked dependency on Linux (with torch), ptxas bundled: CI always compiles
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from ft_kernels.gpu import (
    cache_control,
    decode_attention,
    grouped_experts,
    host_flag,
    prefill_attention,
    slot_copy,
)

TARGET = GPUTarget("cuda", 90, 32)

CONTROL_SIG = dict(
    ids_ptr="*i64", R="i32", slot_of_id="*i64", id_of_slot="*i64", last_use="*i64",
    pinned="*u8", reuse="*i64", again="*i64", routed_ptr="*i64", S="i32", E="i32", L="i32", clock_ptr="*i64", mode="i32",
    ratio="fp32", policy="i32", observe="i32", route_slot="*i64", copy_ids="*i64",
    copy_slots="*i64", counts="*i32",
)  # fmt: skip
W13_SIG = dict(
    x_ptr="*fp32", tok_ptr="*i64", slot_ptr="*i64", w_ptr="*bf16", b_ptr="*bf16",
    h_ptr="*fp32", H="i32", I="i32", alpha="fp32", limit="fp32",
)  # fmt: skip
W2_SIG = dict(
    h_ptr="*fp32", tok_ptr="*i64", slot_ptr="*i64", gate_ptr="*fp32", w_ptr="*bf16",
    b_ptr="*bf16", y_ptr="*fp32", H="i32", I="i32",
)  # fmt: skip


def _compile(fn, sig: dict, consts: dict):
    """Compile ``fn`` (a @triton.jit kernel) for TARGET: arguments not in ``sig`` are constexprs."""
    names = fn.arg_names
    assert set(sig) | set(consts) == set(names), (sorted(names), sorted(sig), sorted(consts))
    full = {n: sig.get(n, "constexpr") for n in names}
    return triton.compile(ASTSource(fn, full, consts), target=TARGET)


@pytest.mark.parametrize("BR", [16, 64])
@pytest.mark.parametrize(
    "ones", [(), ("policy", "observe", "mode"), ("observe", "mode")], ids=["plain", "ones", "some"]
)
def test_cache_control_compiles_for_sm90(BR, ones):
    """``ones``: integer arguments passed as 1, which Triton specialises into constants at launch
    (so an ``if`` on them is resolved while compiling, and names it defines reach later code)."""
    sig = {k: v for k, v in CONTROL_SIG.items() if k not in ones}
    k = _compile(cache_control._control, sig, dict(BR=BR, BS=256, BE=16, **dict.fromkeys(ones, 1)))
    assert ".target sm_90" in k.asm["ptx"]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("gptoss", [False, True])
@pytest.mark.parametrize("wtype", ["*bf16", "*fp16"])
def test_grouped_experts_compile_for_sm90(bias, gptoss, wtype):
    sig13 = {**W13_SIG, "w_ptr": wtype, "b_ptr": wtype}
    consts = dict(HAS_BIAS=bias, GPTOSS=gptoss, H_BF16=wtype == "*bf16", BI=32, BH=64)
    assert ".target sm_90" in _compile(grouped_experts._w13_act, sig13, consts).asm["ptx"]
    sig2 = {**W2_SIG, "w_ptr": wtype, "b_ptr": wtype}
    k = _compile(grouped_experts._w2_gate, sig2, dict(HAS_BIAS=bias, BO=32, BI=32))
    assert ".target sm_90" in k.asm["ptx"]


@pytest.mark.parametrize("word", ["*i32", "*u8"])
def test_slot_copy_compiles_for_sm90(word):
    sig = dict(src=word, dst=word, ids="*i64", slots="*i64", count="*i32", W="i32")
    k = _compile(slot_copy._copy_rows, sig, dict(BLOCK=slot_copy.BLOCK, CHUNK=slot_copy.CHUNK))
    assert ".target sm_90" in k.asm["ptx"]


def test_host_flag_kernels_compile_for_sm90():
    """The polled-flag join: the flag is stored write-through (to host memory, not kept in L2); the
    wait spins on a volatile load (one ld.volatile a turn, not hoisted out of the loop)."""
    sig = dict(seq="*i32", flag="*i32")
    ptx = _compile(host_flag._raise, sig, {}).asm["ptx"]
    assert ".target sm_90" in ptx and "st.global.wt" in ptx, ptx
    k = _compile(host_flag._wait, dict(seq="*i32", done="*i32"), {})
    ptx = k.asm["ptx"]
    assert ".target sm_90" in ptx and "ld.volatile" in ptx, ptx


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("G,D,DV", [(4, 128, 128), (6, 40, 40), (16, 64, 96)])
def test_decode_attention_compiles_for_sm90(bf16, G, D, DV):
    """Both launches of the paged decode attention: a split over keys looked up page by page (tl.dot in
    tf32 on bf16 pools, ieee on fp32 ones), and the merge with and without sinks."""
    p2 = decode_attention.pow2
    pool = "*bf16" if bf16 else "*fp32"
    sig = dict(
        q_ptr=pool, k_ptr=pool, v_ptr=pool, pt_ptr="*i64", ctx_ptr="*i64", m_ptr="*fp32",
        l_ptr="*fp32", acc_ptr="*fp32", scale="fp32", window="i32", pt_stride="i64", S="i32", K="i32",
    )  # fmt: skip
    consts = dict(
        G=G, D=D, DV=DV, NS=8, BG=p2(G), BD=p2(D), BDV=p2(DV), BN=decode_attention.BN, BF16=bf16,
        PREC="tf32" if bf16 else "ieee",
    )  # fmt: skip
    assert ".target sm_90" in _compile(decode_attention._span, sig, consts).asm["ptx"]
    sig = dict(
        m_ptr="*fp32", l_ptr="*fp32", acc_ptr="*fp32", sink_ptr="*fp32", o_ptr="*fp32", N="i32"
    )
    consts = dict(G=G, DV=DV, NS=8, BS=8, BDV=p2(DV), HAS_SINK=bf16)
    assert ".target sm_90" in _compile(decode_attention._merge, sig, consts).asm["ptx"]


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize(
    "G,D,DV", [(8, 256, 256), (8, 128, 128), (8, 64, 64), (64, 40, 36), (1, 48, 32)]
)
def test_prefill_attention_compiles_for_sm90(bf16, G, D, DV):
    """The paged prefill attention (rows of tokens x heads against keys looked up page by page; tl.dot in tf32
    on bf16 pools, ieee on fp32 ones; with sinks) at Qwen3.5's gated attention (G 8, widths 256), Qwen3-30B's,
    GPT-OSS's, one KV head of 64 and one head a KV head, within Hopper's 227 KiB of shared memory a block."""
    pool = "*bf16" if bf16 else "*fp32"
    sig = dict(
        q_ptr=pool, k_ptr=pool, v_ptr=pool, pt_ptr="*i64", qlen_ptr="*i64", ctx_ptr="*i64",
        start_ptr="*i64", sink_ptr="*fp32", o_ptr="*fp32", scale="fp32", window="i32", pt_stride="i64",
        S="i32", K="i32",
    )  # fmt: skip
    consts = dict(
        G=G, D=D, DV=DV, BN=prefill_attention.BN, BF16=bf16, PREC="tf32" if bf16 else "ieee",
        HAS_SINK=bf16, **prefill_attention.blocks(G, D, DV),
    )  # fmt: skip
    k = _compile(prefill_attention._chunk, sig, consts)
    assert ".target sm_90" in k.asm["ptx"] and k.metadata.shared <= 227 * 1024, k.metadata.shared
