"""Python face of the C++ CPU kernels: format codes, optional arguments, output allocation.

Legend: T = tokens, H = hidden, I = expert intermediate, R = routes, N = experts in the bank.
"""

from __future__ import annotations

import os

import torch
from torch.utils.dlpack import to_dlpack

from ft_kernels import _C
from ft_kernels.formats import FORMATS, ExpertWeights

ACTS = {"swiglu": 0, "gptoss": 1}


def _a(t):
    """A tensor argument for _C: a contiguous CPU tensor goes as a DLPack capsule (~0.25 us; nanobind's import of a
    torch tensor through its ``__dlpack__`` method costs ~3 us, and a decode step makes ~10 calls a layer with up
    to 14 tensors each); anything else as given, for nanobind to check and refuse with its message."""
    if (
        isinstance(t, torch.Tensor)
        and t.device.type == "cpu"
        and t.is_contiguous()
        and not t.requires_grad
    ):
        return to_dlpack(t)
    return t


def active_isa() -> str:
    """The instruction set the CPU kernels run with ("avx512bf16": AVX-512 with its BF16 dot product, "avx512",
    "avx2", "neon" or "scalar"; FT_CPU_ISA forces one)."""
    return _C.active_isa()


def to_x16_(
    q: torch.Tensor, cols: int, fmt: str = "q4_k", scale: torch.Tensor | None = None
) -> torch.Tensor:
    """Q4_K, Q5_K, Q6_K or Q3_K (``fmt``) blocks ``q`` uint8 [N, rows, row bytes] (contiguous; rows % 16 == 0, may be padded)
    repacked in place to ``fmt + "_x16"`` on the kernel pool; returns ``q``. Twin: ``kquants.to_x16``. For
    ``fmt`` "mxfp4", "int4_sym", "int8_sym" or "fp8_e4m3", codes ``q`` [N, rows, cols / 2] (8-bit: cols) and their ``scale``
    [N, rows, groups] (uint8 e8m0, float32) both (rows % 16 == 0, cols % 32 == 0; twins ``formats.nib_to_x16``,
    ``formats.int8_to_x16``). ValueError on a bad shape or format."""
    if not q.is_contiguous() or (scale is not None and not scale.is_contiguous()):
        raise ValueError("q and scale must be contiguous")
    if fmt in ("mxfp4", "int4_sym", "int8_sym", "fp8_e4m3"):
        if scale is None:
            raise ValueError(f"{fmt} needs its scales repacked with its codes")
        byte = fmt in ("int8_sym", "fp8_e4m3")
        (_C.int8_to_x16 if byte else _C.nib_to_x16)(_a(q), _a(scale), cols)
        return q
    if fmt not in ("q4_k", "q5_k", "q6_k", "q3_k"):
        raise ValueError(
            f"fmt must be q4_k, q5_k, q6_k, q3_k, mxfp4, int4_sym, int8_sym or fp8_e4m3, got {fmt!r}"
        )
    _C.to_x16(_a(q), cols, FORMATS[fmt + "_x16"])
    return q


def split_blocks(
    blocks: torch.Tensor, head_bytes: int, nibbles: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """GGML's 32-element blocks ``blocks`` uint8 [..., block bytes] (contiguous; Q4_0: 18 bytes, head 2; MXFP4: 17,
    head 1; Q8_0: 34, head 2) split on the kernel pool into (codes [..., block bytes - head_bytes], heads [...,
    head_bytes]), new tensors. Where ``nibbles`` (16 code bytes: element j < 16 the low nibble of byte j, j >= 16
    the high nibble of byte j - 16) the codes come out as the kernels' pairs (element 2k in the low nibble of byte
    k, 2k + 1 in the high one); else as stored. Twin: ``ft_kernels.reference.split_blocks``."""
    *lead, bb = blocks.shape
    flat = blocks.reshape(-1, bb)
    q = torch.empty(flat.shape[0], bb - head_bytes, dtype=torch.uint8)
    head = torch.empty(flat.shape[0], head_bytes, dtype=torch.uint8)
    _C.split_blocks(_a(flat), int(head_bytes), bool(nibbles), _a(q), _a(head))
    return q.view(*lead, bb - head_bytes), head.view(*lead, head_bytes)


def int8_simd(fmt: str) -> bool:
    """Whether ``act_int8`` products with weights in ``fmt`` run a SIMD kernel on the active ISA (False: the
    scalar twin, or a format int8 activations do not apply to). The X16 formats have one on AVX2 and up
    (rows in the lanes)."""
    return bool(_C.int8_simd(FORMATS[fmt]))


def bf16_simd(fmt: str) -> bool:
    """Whether bfloat16 activations meet weights in ``fmt`` in a bf16-activation kernel on the active ISA (AVX-512
    BF16: every 4-bit, K-quant and 8-bit format on AMD CPUs, MXFP4, INT8 and FP8 on Intel's: ``dispatch.cpp``)
    rather than being widened to fp32 for the fp32 kernel. The X16 formats (``formats.REPACKED``) have one there
    only (elsewhere they would run the scalar twin)."""
    return bool(_C.bf16_simd(FORMATS[fmt]))


def bf16_i16(fmt: str, cols: int, group: int = 32) -> bool:
    """Whether bfloat16 activations meet weights in ``fmt`` with ``cols`` columns (INT4: groups of ``group``) as
    16-bit blocks (``cpu/q8.h``: Q16Act; twin ``reference.quantize_act_i16``) on the active ISA: the K-quants,
    Q4_K_X16 and INT4 in groups of 32 (GGUF Q4_0; INT4_SYM_X16 in any group of 32s) where there is no bf16 kernel
    (AVX2, AVX-512 without BF16, Intel's AVX-512 BF16 whose nibble kernels are off), unless FT_BF16_I16=0."""
    return bool(_C.bf16_i16(FORMATS[fmt], int(cols), int(group)))


def bf16_tiles(fmt: str, group: int = 32) -> bool:
    """Whether prefill-sized products of bfloat16 activations with weights in ``fmt`` (INT4: groups of
    ``group``) run on the AMX tile kernels (``arch/x86_amx_*.cpp``): ``q4_k_x16``, ``mxfp4_x16``,
    ``int4_sym_x16``, ``int8_sym_x16``, ``fp8_e4m3_x16`` and ``q6_k`` where the CPU has AMX-BF16, Linux grants
    the tile state and the ISA is avx512bf16, unless FT_AMX=0. ``linear`` takes them from 16 tokens,
    ``moe_experts`` when an expert has more than 4 routes."""
    return bool(_C.bf16_tiles(FORMATS[fmt], int(group)))


def x16_prefetch() -> str:
    """How the AVX-512 X16 kernels prefetch their weight stream: ``"nta"`` (non-temporal into L1, so streamed lines
    pass L2 and L3 by: the default on AMD Zen 5) or ``"l2"`` (elsewhere); FT_X16_PREFETCH=nta or l2 forces one
    (another value: ValueError). Results are the same either way."""
    return _C.x16_prefetch()


def available_isas() -> list[str]:
    """The instruction sets FT_CPU_ISA may force on this machine: "scalar", then "avx2", "avx512" and
    "avx512bf16" where /proc/cpuinfo lists their flags (for tests that run each in a fresh process)."""
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""  # noqa: SIM115
    have = ["scalar"]
    if all(f" {f}" in flags for f in ("avx2", "fma", "f16c")):
        have.append("avx2")
    if all(f" {f}" in flags for f in ("avx512f", "avx512bw", "avx512vl")):
        have += ["avx512"] + (["avx512bf16"] if " avx512_bf16" in flags else [])
    return have


def num_threads() -> int:
    """Threads of the persistent kernel pool (FT_NUM_THREADS, else one per physical core)."""
    return _C.num_threads()


def set_num_threads(n: int) -> None:
    """Resize the kernel pool (workers are pinned to physical cores). Not while a kernel runs."""
    _C.set_num_threads(n)


def set_spin_us(us: int) -> None:
    """Idle pool workers spin ``us`` microseconds before sleeping (0, the default: sleep at once). Worth it
    while a caller issues many short kernel calls and nothing else needs the cores; ``FT_SPIN_US`` overrides."""
    _C.set_spin_us(int(us))


def moe_experts(
    x: torch.Tensor,  # [T, H] float32 or bfloat16
    tok: torch.Tensor,  # [R] int32 token of each route
    eid: torch.Tensor,  # [R] int32 expert of each route (row of the bank)
    gate: torch.Tensor,  # [R] float32 gate weight
    w13: ExpertWeights,  # [N, 2I, H]: gate rows then up rows
    w2: ExpertWeights,  # [N, H, I]
    act: str = "swiglu",  # or "gptoss" (clamped, (up + 1) * gate * sigmoid(alpha * gate))
    alpha: float = 1.702,
    limit: float = 7.0,
    out: torch.Tensor | None = None,  # [T, H] float32, overwritten
    act_int8: bool = False,  # opt-in for 4-bit / K-quant banks: x and h as int8 per 32 columns (reference.quantize_act_int8)
) -> torch.Tensor:
    """Gate-weighted sum of the routed experts, weights dequantised inside the kernel, fp32 accumulation.
    x in bfloat16 means bf16 activations, as a GPU's bf16 expert GEMM: x enters the products as bf16 and the
    intermediate h is rounded to bf16 before W2 (BF16 banks use ``vdpbf16ps`` on CPUs with AVX-512 BF16).
    ``act_int8`` runs 4-bit and K-quant banks (``reference.int8_applies``) with int8 activations and integer dot products
    (llama.cpp's q8_0 scheme; faster, not exact: see reference.quantize_act_int8); other banks ignore it.

    Returns [T, H] float32. Twin: ``ft_kernels.reference.moe_experts``. Raises ValueError naming a bad argument.
    """
    if act not in ACTS:
        raise ValueError(f"act must be one of {', '.join(ACTS)}, got {act!r}")
    for name, w in (("w13", w13), ("w2", w2)):
        if w.fmt not in FORMATS:
            raise ValueError(f"{name}.fmt {w.fmt!r} is not one of {', '.join(FORMATS)}")
    if out is None:
        out = torch.empty(x.shape[0] if x.dim() == 2 else 0, x.shape[-1], dtype=torch.float32)
    _C.moe_experts(
        _a(x),
        _a(tok),
        _a(eid),
        _a(gate),
        FORMATS[w13.fmt],
        _a(w13.q),
        _a(w13.scale),
        _a(w13.zero),
        w13.group,
        w13.global_scale,
        _a(w13.bias),
        FORMATS[w2.fmt],
        _a(w2.q),
        _a(w2.scale),
        _a(w2.zero),
        w2.group,
        w2.global_scale,
        _a(w2.bias),
        ACTS[act],
        alpha,
        limit,
        _a(out),
        act_int8,
    )
    return out


def linear(
    x: torch.Tensor,  # [T, K] float32 or bfloat16
    w: ExpertWeights
    | torch.Tensor,  # one matrix [1, N, K] in any kernel format, or a [N, K] bf16/f16 tensor
    bias: torch.Tensor | None = None,  # [N] float32
    out: torch.Tensor | None = None,  # [T, N] float32 or bfloat16, overwritten
    act_int8: bool = False,  # opt-in for 4-bit / K-quant weights: x as int8 per 32 columns (reference.quantize_act_int8)
    out_dtype: torch.dtype = torch.float32,  # of the result when out is None: float32 or bfloat16
) -> torch.Tensor:
    """Dense ``x @ W.T + bias`` on the kernel pool, W dequantised inside the kernel, fp32 accumulation.

    Returns [T, N] float32, or bfloat16 (the fp32 result rounded once, in the kernel). Twin:
    ``ft_kernels.reference.linear``. Raises ValueError naming a bad argument.
    """
    if isinstance(w, torch.Tensor):
        if w.dim() != 2 or w.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(
                f"w must be a [N, K] bfloat16 or float16 tensor, got {w.dtype} {list(w.shape)}"
            )
        w = ExpertWeights("bf16" if w.dtype == torch.bfloat16 else "f16", w[None], w.shape[1])
    if w.fmt not in FORMATS:
        raise ValueError(f"w.fmt {w.fmt!r} is not one of {', '.join(FORMATS)}")
    if out is None:
        out = torch.empty(x.shape[0] if x.dim() == 2 else 0, w.rows, dtype=out_dtype)
    _C.linear(
        _a(x),
        FORMATS[w.fmt],
        _a(w.q),
        _a(w.scale),
        _a(w.zero),
        w.group,
        w.global_scale,
        w.cols,
        None if bias is None else _a(bias.float().contiguous()),
        _a(out),
        act_int8,
    )
    return out


def rms_norm(
    x: torch.Tensor, w: torch.Tensor, eps: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """RMSNorm over the last dim D on the calling thread: x [..., D] and w [D] both bfloat16 or both float32;
    returns ``w * dtype(x * rsqrt(mean(x^2) + eps))`` in x's dtype (bf16: the normalised row rounded to bf16
    before the product with w, as transformers does), fp32 math. A float32 w with bf16 x (the (1 + w) norms
    of the Qwen3-Next family, w = 1 + weight) gives ``bf16((x * rsqrt(..)) * w)``, rounded once. For the few
    rows of a decode step, where torch's seven ops cost more than the arithmetic. Twin:
    ``ft_kernels.reference.rms_norm``."""
    if out is None:
        out = torch.empty_like(x)
    _C.rms_norm(_a(x), _a(w), float(eps), _a(out))
    return out


ROUTES = {"softmax": 0, "topk_softmax": 1}


def route_topk(
    logits: torch.Tensor, k: int, kind: str = "softmax", renorm: bool = False, base: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MoE routes of T tokens on the calling thread from float32 router logits [T, E]: ``softmax`` takes the k
    largest of softmax(logits) as gates (divided by their sum when ``renorm``); ``topk_softmax`` the k largest
    logits, gates the softmax over those k (GPT-OSS). Returns tok, eid [T*k] int32 (token t's routes at t*k..,
    experts base + id in descending order, picked as torch.topk picks them, ties and NaN included) and gate [T*k]
    float32: the flat route lists ``moe_experts`` takes. For a decode step, where torch's ~6 ops cost more than
    the arithmetic. Twin: ``ft_kernels.reference.route_topk``."""
    if kind not in ROUTES:
        raise ValueError(f"kind must be one of {', '.join(ROUTES)}, got {kind!r}")
    n = logits.shape[0] * k if logits.dim() == 2 else 0
    tok, eid = torch.empty(n, dtype=torch.int32), torch.empty(n, dtype=torch.int32)
    gate = torch.empty(n, dtype=torch.float32)
    _C.route_topk(
        _a(logits), int(k), ROUTES[kind], bool(renorm), int(base), _a(tok), _a(eid), _a(gate)
    )
    return tok, eid, gate


def rope(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    interleaved: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotary embedding of x [T, H, D] (bfloat16 or float32) by cos, sin [T, R/2] float32 on the calling thread:
    the first R dims of each head rotate (pairs (i, R/2 + i), or (2i, 2i + 1) when ``interleaved``; the result in
    halves either way), the rest are copied; fp32 math rounded as torch's ops round, the result in x's dtype.
    For a decode step's q and k, where torch's ~10 ops cost more than the arithmetic. Twin:
    ``ft_kernels.reference.rope``."""
    if out is None:
        out = torch.empty_like(x)
    _C.rope(_a(x), _a(cos), _a(sin), bool(interleaved), _a(out))
    return out


def decode_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    page_table: torch.Tensor,
    ctx_lens: torch.Tensor,
    scale: float,
    window: int = 0,
    sinks: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    split_keys: int = 0,
) -> torch.Tensor:
    """Attention of one new token per sequence over its paged context, straight from the KV pools (no gather,
    padding or mask), a task per sequence (and span of its keys) for all its KV heads on the kernel pool.

    q [B, N, D] float32 or bfloat16; k_pool [P, S, K, D] and v_pool [P, S, K, Dv] of one dtype (float32 or
    bfloat16); page_table [B, Pmax] int64 (token j of sequence b sits at row j % S of page page_table[b, j // S]);
    ctx_lens [B] int64 (keys 0 .. ctx_lens[b] - 1, the query being the last); window > 0 keeps the last
    ``window`` keys; sinks [N] float32 adds one value-less logit per head (GPT-OSS). Returns float32 [B, N, Dv].
    Where sequences are fewer than twice the pool's threads, contexts are split into spans of at least
    ``split_keys`` keys (0: 256 / K, at least 32) run in parallel and merged. Scores and value sums are exact
    products with fp32 sums, except where ``decode_attention_bf16`` says the CPU's bf16 dot product takes bf16 q
    and pools: there the softmax weights are rounded to bf16 for the value sum and summed as rounded, as in
    ``prefill_attention``. Twin: ``ft_kernels.reference.decode_attention``."""
    B, N, _ = q.shape
    if out is None:
        out = torch.empty(B, N, v_pool.shape[-1], dtype=torch.float32)
    _C.decode_attention(
        _a(q),
        _a(k_pool),
        _a(v_pool),
        _a(page_table),
        _a(ctx_lens),
        float(scale),
        int(window),
        _a(sinks),
        _a(out),
        int(split_keys),
    )
    return out


def prefill_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    page_table: torch.Tensor,
    q_lens: torch.Tensor,
    ctx_lens: torch.Tensor,
    scale: float,
    window: int = 0,
    sinks: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of a packed batch's new tokens over their paged contexts, straight from bf16 KV pools
    (no gather, padding or mask): flash attention in blocks of 32 keys, tasks of (sequence, KV head, ~64 rows of
    queries x heads) on the kernel pool.

    q [T, N, D] bfloat16 (D even), sequence b's q_lens[b] tokens consecutive, in order of b; k_pool [P, S, K, D]
    and v_pool [P, S, K, Dv] bfloat16 (this forward's keys already written); page_table [B, Pmax] int64;
    q_lens, ctx_lens [B] int64 (the new tokens are the last q_lens[b] of ctx_lens[b]); window > 0: a query at
    position p sees keys p - window + 1 .. p; sinks [N] float32 adds one value-less logit per head (GPT-OSS).
    Scores are fp32 sums of exact bf16 products; the softmax weights are rounded to bf16 for the value sum (as a
    bf16 flash kernel does: relative 2^-9 each) and summed as rounded. Returns float32 [T, N, Dv]. Runs its
    AVX-512 BF16 build where ``prefill_attention_simd()``, else the scalar ground truth (slow: for tests).
    Twin: ``ft_kernels.reference.prefill_attention``."""
    if out is None:
        out = torch.empty(q.shape[0], q.shape[1], v_pool.shape[-1], dtype=torch.float32)
    _C.prefill_attention(
        _a(q),
        _a(k_pool),
        _a(v_pool),
        _a(page_table),
        _a(q_lens),
        _a(ctx_lens),
        float(scale),
        int(window),
        _a(sinks),
        _a(out),
    )
    return out


def decode_attention_bf16(heads: int, kv_heads: int, d: int, dv: int) -> bool:
    """Whether ``decode_attention`` runs bf16 q and pools of these shapes (``heads`` query heads over
    ``kv_heads``, key / value widths ``d`` / ``dv``) on the bf16 dot product here (AVX-512 BF16, FT_CPU_ISA
    respected: heads / kv_heads of 1, 2, 4, 8 or 16, widths in 32s), weights rounded to bf16 as in
    ``prefill_attention``."""
    return heads % kv_heads == 0 and bool(_C.decode_attention_bf16(heads // kv_heads, d, dv))


def prefill_attention_simd() -> bool:
    """Whether ``prefill_attention`` runs its SIMD build on this CPU (AVX-512 BF16; FT_CPU_ISA respected)."""
    return bool(_C.prefill_attention_simd())


def gdn_decode(
    proj: torch.Tensor,
    conv_w: torch.Tensor,
    conv_state: torch.Tensor,
    state: torch.Tensor,
    slots: torch.Tensor,
    neg_A: torch.Tensor,
    dt_bias: torch.Tensor,
    norm_w: torch.Tensor,
    eps: float,
    k_heads: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The core of a Gated DeltaNet layer for one decode token per sequence, from the in-projection to the input of
    the out-projection, one task per (sequence, value head) on the kernel pool.

    proj [B, C + Hv*Dv + 2*Hv] (columns q k v | z | b | a; C = 2*Hk*Dk + Hv*Dv) float32 or bfloat16; conv_w
    [C, Kc], conv_state [N, C, Kc-1] and norm_w [Dv] in proj's dtype; state [N, Hv, Dk, Dv] float32; slots [B]
    int64 (distinct); neg_A = -exp(A_log) and dt_bias [Hv] float32. conv_state and state rows ``slots`` are
    advanced in place. Returns [B, Hv*Dv] in proj's dtype. Twin: ``ft_kernels.reference.gdn_decode``."""
    if out is None:
        out = torch.empty(proj.shape[0], state.shape[1] * state.shape[3], dtype=proj.dtype)
    _C.gdn_decode(
        *(_a(t) for t in (proj, conv_w, conv_state, state, slots, neg_A, dt_bias, norm_w)),
        float(eps),
        int(k_heads),
        _a(out),
    )
    return out


def gdn_prefill(
    y: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    k_heads: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The gated delta rule of a Gated DeltaNet layer over one sequence's L prefill tokens, token by token, on the
    kernel pool: tasks are (value head, block of 32 state columns), each block kept in L1 over all L tokens.

    y [L, >= C] (the conv + SiLU output, columns q | k | v first; C = 2*Hk*Dk + Hv*Dv) float32 or bfloat16,
    contiguous; g (log decay) and beta [L, Hv] float32; state [Hv, Dk, Dv] float32, contiguous, advanced in place.
    Returns the core output [L, Hv, Dv] float32 (into ``out`` when given). Twin: ``ft_kernels.reference.gdn_prefill``
    (ft_core's recurrent_gated_delta_rule on the split, normalised heads)."""
    L, (Hv, _, Dv) = y.shape[0], state.shape
    if out is None:
        out = torch.empty(L, Hv, Dv)
    _C.gdn_prefill(_a(y), _a(g), _a(beta), _a(state), int(k_heads), _a(out))
    return out


def sigmoid_mul(a: torch.Tensor, g: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``a * sigmoid(g)`` on the calling thread, rounded as torch's two ops in a's dtype (float32 or bfloat16):
    a [T, C], g [T, C] or [T, 1] (one gate per row). Twin: ``ft_kernels.reference.sigmoid_mul``."""
    if out is None:
        out = torch.empty_like(a)
    _C.sigmoid_mul(_a(a), _a(g), _a(out))
    return out


def silu_mul(g: torch.Tensor, u: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``silu(g) * u`` (SwiGLU) on the calling thread, rounded as torch's two ops in g's dtype (float32 or
    bfloat16); g, u of one shape. Twin: ``ft_kernels.reference.silu_mul``."""
    if out is None:
        out = torch.empty_like(g)
    _C.silu_mul(_a(g), _a(u), _a(out))
    return out


def moe_swiglu(x, tok, eid, gate, w13: torch.Tensor, w2: torch.Tensor, out=None) -> torch.Tensor:
    """Shorthand for bf16 banks: w13 [N, 2I, H], w2 [N, H, I] bfloat16 tensors."""
    if w13.dtype != torch.bfloat16 or w2.dtype != torch.bfloat16:
        raise ValueError(f"moe_swiglu takes bfloat16 banks, got w13 {w13.dtype} and w2 {w2.dtype}")
    return moe_experts(
        x,
        tok,
        eid,
        gate,
        ExpertWeights("bf16", w13, w13.shape[2]),
        ExpertWeights("bf16", w2, w2.shape[2]),
        out=out,
    )
