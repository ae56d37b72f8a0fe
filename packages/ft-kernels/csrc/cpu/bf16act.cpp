#include "cpu/bf16act.h"

namespace ft {

void bf16_to_f32_n(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void f32_to_bf16_n(const float* src, int64_t n, uint16_t* dst, float* dst_f) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t b = f32_to_bf16(src[i]);
    dst[i] = b;
    if (dst_f) dst_f[i] = bf16_to_f32(b);
  }
}

int x16_prefetch_bytes() { return 8192; }

}  // namespace ft
