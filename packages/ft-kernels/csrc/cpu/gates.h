// The elementwise gates of a decode step's layers, rounded as torch's ops on tensors of the activation dtype
// (each op's fp32 result rounded to it): Qwen3-Next-family attention's o * sigmoid(gate), the shared expert's
// sigmoid gate, and SwiGLU's silu(gate) * up. On the calling thread; Python-free.
#pragma once
#include <cstdint>

namespace ft {

// y[t, i] = dt(a[t, i] * dt(sigmoid(g[t, gc == 1 ? 0 : i]))) for t < T, i < C; a, y [T, C], g [T, gc] (gc = C
// or 1), one dtype dt (bf16 or fp32), contiguous. y may be a.
void sigmoid_mul(const void* a, const void* g, bool bf16, int64_t T, int64_t C, int64_t gc, void* y);

// y = dt(dt(silu(g)) * u) elementwise over n; one dtype, contiguous. y may be g or u.
void silu_mul(const void* g, const void* u, bool bf16, int64_t n, void* y);

}  // namespace ft
