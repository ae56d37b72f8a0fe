// Bf16 activations: the row kernels of a bfloat16 engine. x arrives in bf16 (as the engine holds it) and
// enters the dot products as bf16, products accumulated in fp32 -- what a GPU's bf16 GEMM does, and on
// AVX-512 BF16 one `vdpbf16ps` per 32 weight columns. The MoE FFN's intermediate h is rounded to bf16
// (round to nearest even) before W2 on every ISA and path, so results do not depend on where an expert ran
// beyond fp32 accumulation order. Python-free.
#pragma once
#include <cstdint>

#include "cpu/formats.h"

namespace ft {

// Y[t, r - r0] = sum_c W[r, c] * bf16(X[t, c]) for r in [r0, r1), fp32 accumulation. X: bf16 bits [ntok, ldx].
using RowsBf16Fn = void (*)(const WeightMat& w, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                            float* Y, int64_t ldy);

// Where a bf16-activation kernel takes a matrix (dispatch.h: rows_bf16_kernel; BF16 weights on AVX-512 BF16, and
// the 4-bit formats where that is faster) it runs. Else, for the K-quants on ISAs without a bf16 dot product
// (AVX2, AVX-512 without BF16), x becomes 16-bit blocks (cpu/q8.h: Q16Act; exact within 2^7 of each block's max,
// else within max|x| 2^-15) for integer dot products; elsewhere x is widened to fp32, exactly, and the fp32
// kernels run on the same values.

// Widen n bf16 values to fp32 (exact).
void bf16_to_f32_n(const uint16_t* src, int64_t n, float* dst);

// Round n fp32 values to bf16, to nearest even (NaN stays NaN); dst_f (optional) gets the rounded values as fp32.
void f32_to_bf16_n(const float* src, int64_t n, uint16_t* dst, float* dst_f);

// x <- bf16(x + y) over n elements, y the bf16 yb or, when yb is nullptr, the fp32 yf rounded to bf16 first
// (torch's `x + y` / `x + y.to(bfloat16)` on bf16 tensors: a residual sum).
void add_bf16_n(uint16_t* x, const uint16_t* yb, const float* yf, int64_t n);

// The prefetch distance, in bytes, of the rows-in-lanes bf16 kernels of the X16 formats (cpu/arch/
// x86_avx512bf16_x16.h; defined out of their files on purpose, see there).
int x16_prefetch_bytes();

}  // namespace ft
