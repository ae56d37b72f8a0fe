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

struct Q8Act {
  const int8_t* q = nullptr;   // [ntok, ldq] bytes; blocks of 32 in the order above
  const float* d = nullptr;    // [ntok, ldb] block scales
  const float* sd = nullptr;   // [ntok, 2 * ldb]: d * sum(q) over each half (16 columns) of a block
  int64_t ntok = 0, ldq = 0, ldb = 0;

  Q8Act rows(int64_t start, int64_t n) const {  // tokens [start, start + n)
    return Q8Act{q + start * ldq, d + start * ldb, sd + start * 2 * ldb, n, ldq, ldb};
  }
};

// Y[t, r - r0] = sum_c W[r, c] * xhat[t, c] for r in [r0, r1), xhat = q * d. W: MXFP4, NVFP4, INT4_*, Q4_K,
// Q5_K, Q6_K, Q3_K, Q2_K (whose sub-blocks of 32 / 16 columns lie inside the activation blocks).
using RowsQ8Fn = void (*)(const WeightMat& w, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy);

// Quantise one row of `cols` (a multiple of 32) fp32 values into q [cols], d [cols / 32], sd [cols / 16].
void quantize_q8(const float* x, int64_t cols, int8_t* q, float* d, float* sd);

// True when the q8 kernels take this matrix: a 4-bit format, cols % 32 == 0 and (INT4) group % 32 == 0; or a
// K-quant (whole super-blocks).
bool q8_supported(const WeightMat& w);

// Owns the quantised rows of ntok tokens (a grow-only buffer, reused between calls).
struct Q8Rows {
  int8_t* q = nullptr;
  float* f = nullptr;
  int64_t cap_q = 0, cap_f = 0;
  Q8Act view;
  // Quantise X [ntok, ldx] (cols columns of each row) into this buffer; returns the view.
  const Q8Act& set(const float* X, int64_t ntok, int64_t ldx, int64_t cols);
  ~Q8Rows();
};

}  // namespace ft
