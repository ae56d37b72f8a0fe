// Int8 activations for the 4-bit and K-quant weight formats (opt-in): x quantised per block of 32 columns to int8
// with one fp32 scale (d = max|x| / 127, q = round-half-even(x * 127 / max|x|)), as llama.cpp's q8_0.
// Python-free.
//
// Layout of one token's row of blocks (what every q8 row kernel reads): block b holds columns
// [32b, 32b + 32) in the nibble order of the 4-bit formats' bytes: the 16 even columns 32b, 32b + 2, ...,
// then the 16 odd ones (so a block's 16 weight bytes, low nibbles then high nibbles, line up with it).
// Per block also d and the sums of q over columns [32b, 32b + 16) and [32b + 16, 32b + 32) times d
// (the offset / zero-point corrections).
#pragma once
#include <cstdint>

#include "cpu/formats.h"

namespace ft {

template <class E>
struct QAct {  // E = int8_t: Q8Act; int16_t: Q16Act (below)
  const E* q = nullptr;        // [ntok, ldq] codes; blocks of 32 in the order above
  const float* d = nullptr;    // [ntok, ldb] block scales
  const float* sd = nullptr;   // [ntok, 2 * ldb]: d * sum(q) over each half (16 columns) of a block
  int64_t ntok = 0, ldq = 0, ldb = 0;

  QAct rows(int64_t start, int64_t n) const {  // tokens [start, start + n)
    return QAct{q + start * ldq, d + start * ldb, sd + start * 2 * ldb, n, ldq, ldb};
  }
};
using Q8Act = QAct<int8_t>;

// Y[t, r - r0] = sum_c W[r, c] * xhat[t, c] for r in [r0, r1), xhat = q * d. W: MXFP4(_X16), NVFP4, INT4_*, Q4_K,
// Q5_K, Q6_K, Q3_K, Q2_K (whose sub-blocks of 32 / 16 columns lie inside the activation blocks).
using RowsQ8Fn = void (*)(const WeightMat& w, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy);

// Quantise one row of `cols` (a multiple of 32) fp32 values into q [cols], d [cols / 32], sd [cols / 16]: the scalar
// code; Q8Rows takes the active ISA's (dispatch.h: quantize_q8_fn), which writes the same bits.
void quantize_q8(const float* x, int64_t cols, int8_t* q, float* d, float* sd);
using QuantizeQ8Fn = void (*)(const float* x, int64_t cols, int8_t* q, float* d, float* sd);

// True when the q8 kernels take this matrix: a 4-bit format, cols % 32 == 0 and (INT4) group % 32 == 0; or a
// K-quant (whole super-blocks).
bool q8_supported(const WeightMat& w);

// Grow-only buffers of ntok tokens' quantised rows (reused between calls): the view's codes, then its d and sd.
template <class E>
struct QRowsBuf {
  E* q = nullptr;
  float* f = nullptr;
  int64_t cap_q = 0, cap_f = 0;
  QAct<E> view;
  // Room for ntok rows of cols columns; returns the view's layout over it (not yet filled).
  QAct<E> reserve(int64_t ntok, int64_t cols);
  // Rows rows[0..n) of src (codes, d and sd) copied in that order into this buffer; returns the view. For a MoE
  // call's routes: each token quantised once, then gathered per route.
  const QAct<E>& gather(const QAct<E>& src, const int64_t* rows, int64_t n);
  QRowsBuf() = default;
  QRowsBuf(const QRowsBuf&) = delete;
  QRowsBuf& operator=(const QRowsBuf&) = delete;
  ~QRowsBuf();
};

// Owns the quantised rows of ntok tokens.
struct Q8Rows : QRowsBuf<int8_t> {
  // Quantise X [ntok, ldx] (cols columns of each row) into this buffer (on the kernel pool from 2^16 elements: a
  // caller outside its tasks); returns the view.
  const Q8Act& set(const float* X, int64_t ntok, int64_t ldx, int64_t cols);
};

}  // namespace ft

namespace ft {

// 16-bit activations: what a bfloat16 engine's x becomes on CPUs without a bf16 dot product (AVX2; AVX-512
// without BF16), in place of fp32 products. Per block of 32 columns, d = 2^(E - 14) with E = floor(log2 max|x|)
// (clamped to >= -100) and q = round-half-even(x / d), |q| < 2^15: a power-of-two scale, so every bf16 value
// within 2^7 of its block's max (8 significant bits) is exact, and any other is off by at most d / 2 <= max|x| 2^-15.
// A block holding an Inf or NaN gets d = sd = NaN (the result is NaN, as with fp32 products).
// Layout: Q8Act's (each block's 16 even columns, then its 16 odd ones; sd over its halves in natural order), so a
// kernel takes a 16-bit word's low and high byte as an even and an odd column.
using Q16Act = QAct<int16_t>;

// Y[t, r - r0] = sum_c W[r, c] * xhat[t, c] for r in [r0, r1), xhat = q * d: the K-quants (Q4_K, Q5_K, Q6_K,
// Q3_K, Q2_K) and INT4 on AVX2 (where q8_supported).
using RowsQ16Fn = void (*)(const WeightMat& w, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy);

// Owns the 16-bit rows of ntok bf16 tokens, quantised by the active ISA's quantiser (dispatch.h: quantize_q16_fn).
struct Q16Rows : QRowsBuf<int16_t> {
  // As Q8Rows::set (on the pool from 2^16 elements).
  const Q16Act& set(const uint16_t* X, int64_t ntok, int64_t ldx, int64_t cols);
};

// One row of `cols` (a multiple of 32) bf16 values into q [cols], d [cols / 32], sd [cols / 16] (Q16Act's layout).
using QuantizeQ16Fn = void (*)(const uint16_t* x, int64_t cols, int16_t* q, float* d, float* sd);

}  // namespace ft
