// Dense y = x W^T + b on the CPU thread pool, for weights of any kernel format. Python-free.
#pragma once
#include <cstdint>

#include "cpu/formats.h"

namespace ft {

struct LinearArgs {
  const void* x = nullptr;  // [T, K] fp32, or bf16 when x_bf16 (row stride K)
  bool x_bf16 = false;
  int64_t T = 0;
  WeightMat w;                  // [N, K]
  const float* bias = nullptr;  // [N] or nullptr
  float* y = nullptr;           // [T, N] fp32, overwritten (unused when y_bf16 is set)
  uint16_t* y_bf16 = nullptr;   // [T, N] bf16: y rounded to bf16 here instead, each block as it is done
  int64_t ldy_bf16 = 0;         // y_bf16's row stride (0: N); a part's columns within a wider output
  bool act_int8 = false;        // opt-in: x quantised to int8 per 32 columns (cpu/q8.h) when q8_supported(w)
};

// y[t, r] = sum_c W[r, c] x[t, c] (+ bias[r]), fp32 accumulation (bf16 x enters the products as bf16:
// cpu/bf16act.h). Rows are split into blocks across the
// pool (each weight byte read once per call; a block's rows are re-read from L1/L2 per 4 tokens).
// Throws std::invalid_argument naming the offending argument.
void linear(const LinearArgs& a);

// Several products of the same x (same x, x_bf16, T and K; e.g. the q / k / v parts of a projection
// stored as separate matrices) as one job on the pool: each part's blocks are tasks of that job, so the small
// parts run on every thread and the pool waits once, not once a part. Each part's result is linear()'s.
void linear_parts(const LinearArgs* parts, int64_t n);

}  // namespace ft
