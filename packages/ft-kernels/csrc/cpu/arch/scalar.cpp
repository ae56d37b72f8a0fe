// Scalar fallback: portable C++, the ground truth the SIMD files are tested against.
#include "cpu/isa.h"
#include <cstring>

namespace ft {

static inline float bf16_to_f32(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void gemv_bf16_scalar(const uint16_t* W, int64_t rows, int64_t cols, int64_t ldw,
                      const float* X, int64_t ntok, int64_t ldx, float* Y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* w = W + r * ldw;
    for (int64_t t = 0; t < ntok; ++t) {
      const float* x = X + t * ldx;
      float acc = 0.f;
      for (int64_t c = 0; c < cols; ++c) acc += bf16_to_f32(w[c]) * x[c];
      Y[t * ldy + r] = acc;
    }
  }
}

}  // namespace ft
