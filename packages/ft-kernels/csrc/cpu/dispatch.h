// Run-time choice of instruction set and of the row kernel for each weight format.
#pragma once
#include "cpu/attn_decode.h"
#include "cpu/attn_prefill.h"
#include "cpu/bf16act.h"
#include "cpu/formats.h"
#include "cpu/gdn_decode.h"
#include "cpu/gdn_prefill.h"
#include "cpu/q8.h"

namespace ft {

// "avx512bf16" (AVX-512 with the BF16 dot product), "avx512", "avx2", "neon" or "scalar": FT_CPU_ISA forces one (an unknown name, or one this CPU
// lacks, throws std::invalid_argument); otherwise the best the CPU supports. Read once per process.
const char* active_isa();

// The fastest kernel for `fmt` on the active ISA (the scalar one where an ISA lacks that format).
RowsFn rows_kernel(Fmt fmt);

// The scalar fp32 kernel (cpu/arch/scalar.cpp): every format's ground truth.
void rows_scalar(const WeightMat& w, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                 int64_t ldy);

// The int8-activation kernel for a 4-bit `fmt` (cpu/q8.h) on the active ISA (scalar where it has none).
RowsQ8Fn rows_q8_kernel(Fmt fmt);
// The scalar int8-activation kernel (cpu/arch/scalar_q8.cpp): every q8 format's ground truth.
void rows_q8_scalar(const WeightMat& w, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy);

// The bf16-activation kernel for `w` (cpu/bf16act.h) on the active ISA, or nullptr where it has none (or where
// the fp32 kernel is the faster): the caller then widens x to fp32 and uses rows_kernel (the same values,
// fp32 products). `tokens`: those of each call, where the caller knows them (linear.cpp): nullptr also where the
// kernel would widen x itself for that few, once per call (row-wise INT8_SYM below 12 tokens) -- the caller widens
// it once for all.
constexpr int64_t kAnyTokens = -1;
constexpr int kInt8TokMin = 12;  // tokens from which row-wise INT8_SYM's bf16 kernel is its own (x86_avx512bf16_int8.cpp)
RowsBf16Fn rows_bf16_kernel(const WeightMat& w, int64_t tokens = kAnyTokens);
// Where rows_bf16_kernel has none, a bf16-activation kernel for calls of one token, or nullptr: AVX2 BF16 weights
// (x decoded as the weights are, no widened copy; arch/x86_avx2_bf16act.cpp).
RowsBf16Fn rows_bf16_one_kernel(const WeightMat& w);

// The tile (AMX) kernel of bf16 activations for `w`, for prefill-sized calls (the caller decides from its token
// count), where the CPU has AMX-BF16, the OS grants the tile state, the active ISA is avx512bf16 and the format has
// one (Q4_K_X16, MXFP4_X16, INT4_SYM_X16, Q6_K, INT8_SYM_X16, FP8_E4M3_X16); else nullptr. FT_AMX=0 turns them off.
RowsBf16Fn rows_tile_kernel(const WeightMat& w);
// Tokens from which linear takes the tile kernels (the MoE FFN: a prefill-sized call, more than 4 routes of an
// expert).
constexpr int64_t kTileMinTokens = 16;

// The 16-bit-activation kernel for `w` (cpu/q8.h: Q16Act) where a bf16 engine's x would otherwise be widened to
// fp32 (no bf16 kernel for it: AVX2, AVX-512 without BF16) and the format has one; else nullptr.
RowsQ16Fn rows_q16_kernel(const WeightMat& w);
// The quantiser of bf16 rows into Q16Act's blocks (built for AVX2; only called where rows_q16_kernel gave a kernel).
QuantizeQ16Fn quantize_q16_fn();
// The quantiser of fp32 rows into Q8Act's int8 blocks: AVX2 code on x86 ISAs, else the scalar quantize_q8 (the same
// bits).
QuantizeQ8Fn quantize_q8_fn();

// Whether the AVX-512 X16 kernels prefetch their weight stream non-temporally into L1 (cpu/arch/x86_x16_prefetch.h)
// rather than into L2: on AMD's Zen 5, where it streams more of the read bandwidth. FT_X16_PREFETCH=nta or l2 forces
// one. Read once per process, at load by the kernels' files: it never throws (another value counts as unset there);
// check_x16_prefetch, which rows_bf16_kernel calls (asked before any 16-bit kernel), throws std::invalid_argument
// for it.
bool x16_prefetch_nta();
void check_x16_prefetch();

// The AVX2 builds of the bf16 element-wise pieces of a decode step (cpu/arch/x86_avx2_bf16ops.cpp: the scalar
// loops' results bit for bit) where the active ISA runs AVX2 code, else nullptr (the scalar loops). rms_norm's bf16 path
// (norm.h), f32_to_bf16_n (bf16act.h) and add_bf16_n (x = bf16(x + y), y bf16 yb or bf16(yf)).
using RmsNormBf16Fn = void (*)(const uint16_t* x, const void* w, bool w_f32, int64_t rows, int64_t D, float eps,
                               uint16_t* y);
using F32ToBf16Fn = void (*)(const float* src, int64_t n, uint16_t* dst, float* dst_f);
using AddBf16Fn = void (*)(uint16_t* x, const uint16_t* yb, const float* yf, int64_t n);
RmsNormBf16Fn rms_norm_bf16_fn();
F32ToBf16Fn f32_to_bf16_fn();
AddBf16Fn add_bf16_fn();

// The decode-attention span task (cpu/attn_decode.h) for a's shapes and dtypes on the active ISA: the bf16
// dot-product span where attn_decode_bf16_takes, else the exact-product span.
AttnSpanFn attn_span_kernel(const DecodeAttn& a);
// Whether decode attention multiplies bf16 q and pools with `vdpbf16ps` for G = N / K query heads a KV head and
// key / value widths D / Dv (AVX-512 BF16: G of 1, 2, 4, 8, 16, widths in 32s), weights rounded to bf16 as in
// the prefill kernel; fp32 q or pools always take the exact-product span.
bool attn_decode_bf16_takes(int64_t G, int64_t D, int64_t Dv);

// The prefill-attention task (cpu/attn_prefill.h) built for the active ISA: AVX-512 BF16, else the scalar ground
// truth; attn_prefill_simd() says which (callers without it keep their own attention).
AttnPrefillFn attn_prefill_kernel();
bool attn_prefill_simd();

// The Gated DeltaNet decode task (cpu/gdn_decode.h) built for the active ISA.
GdnHeadFn gdn_head_kernel();

// The Gated DeltaNet prefill rule's task (cpu/gdn_prefill.h) built for the active ISA.
GdnRuleFn gdn_rule_kernel();

}  // namespace ft
