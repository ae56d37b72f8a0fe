#include "cpu/bf16act.h"

#include "cpu/dispatch.h"  // the AVX2 builds of the two loops below

namespace ft {

void bf16_to_f32_n(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void f32_to_bf16_n(const float* src, int64_t n, uint16_t* dst, float* dst_f) {
  if (F32ToBf16Fn fn = f32_to_bf16_fn()) return fn(src, n, dst, dst_f);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t b = f32_to_bf16(src[i]);
    dst[i] = b;
    if (dst_f) dst_f[i] = bf16_to_f32(b);
  }
}

void add_bf16_n(uint16_t* x, const uint16_t* yb, const float* yf, int64_t n) {
  if (AddBf16Fn fn = add_bf16_fn()) return fn(x, yb, yf, n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(yb ? yb[i] : f32_to_bf16(yf[i])));
}

int x16_prefetch_bytes() { return 8192; }

}  // namespace ft
