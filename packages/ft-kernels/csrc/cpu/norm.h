// RMSNorm of a few rows on the calling thread (a decode step runs ~4 per layer: input, post-attention and the
// q / k head norms), or of many on the kernel pool (rms_norm_rows). Python-free.
#pragma once
#include <cstdint>

namespace ft {

// y[r] = w * dt(x[r] * rsqrt(mean(x[r]^2) + eps)) for rows r < rows of D elements, in fp32 with the result in
// the dtype dt of x: bf16 (x and w bf16, each product rounded to bf16 as transformers' bf16 RMSNorm does:
// the normalised row first, then its product with w) or fp32 (x and w fp32: (x * r) * w). With w_f32 and bf16 x
// (the (1 + w) norms of the Qwen3-Next family, w = 1 + weight precomputed in fp32): y = bf16((x * r) * w),
// rounded once. x, w, y contiguous.
void rms_norm(const void* x, const void* w, bool bf16, int64_t rows, int64_t D, float eps, void* y, bool w_f32 = false);

// The same over the kernel pool in blocks of rows where there are many (a prefill's norms: 128 tokens of 2048 took
// ~0.33 ms on one thread), else on the calling thread. Not from inside a pool task.
void rms_norm_rows(const void* x, const void* w, bool bf16, int64_t rows, int64_t D, float eps, void* y,
                   bool w_f32 = false);

}  // namespace ft
