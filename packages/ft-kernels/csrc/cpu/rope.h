// Rotary position embedding of a few rows (a decode step's q and k: ~2 calls a layer) in one C++ pass on the
// calling thread, replacing ~10 torch ops a call. Python-free.
#pragma once
#include <cstdint>

namespace ft {

// y[t, h] = x[t, h] with its first R dims rotated: with half = R / 2, a_i, b_i the pair i (NeoX: dims i and
// half + i; interleaved: dims 2i and 2i + 1), c = cos[t, i], s = sin[t, i]:
//   y[i] = a_i c - b_i s,  y[half + i] = b_i c + a_i s  (i < half; the output in halves in both layouts),
//   y[d] = x[d] for R <= d < D.
// fp32 arithmetic, each product and sum rounded to fp32 (no fused multiply-add: the file is built with
// -ffp-contract=off), then rounded to bf16 when x is bf16 -- the same operations as the torch form
// (ft_kernels.reference.rope). x, y [T, H, D] contiguous, bf16 or fp32 (one dtype); cos, sin [T, half] fp32.
void rope(const void* x, bool bf16, int64_t T, int64_t H, int64_t D, int64_t R, const float* cos, const float* sin,
          bool interleaved, void* y);

}  // namespace ft
