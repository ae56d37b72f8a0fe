// Scalar q8 kernel (int8 activations) for the 4-bit formats: integer dot per block of 32, scaled once.
// The ground truth of the SIMD q8 files; it reads the same block layout (cpu/q8.h).
#include "cpu/q8.h"

namespace ft {

// Integer code of weight (r, c) and the fp32 factor of its block of 16 / group, so that W = code * factor.
static inline void code_and_scale(const WeightMat& w, int64_t r, int64_t c, int& code, float& f) {
  const uint8_t nib = (w.q[r * w.q_stride + c / 2] >> (4 * (c & 1))) & 0xf;
  const uint8_t* bs = static_cast<const uint8_t*>(w.scale) + r * w.scale_stride;
  const float* fs = static_cast<const float*>(w.scale) + r * w.scale_stride;
  static const int k2e2m1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  switch (w.fmt) {
    case Fmt::MXFP4: code = k2e2m1[nib]; f = 0.5f * e8m0_to_f32(bs[c / 32]); return;
    case Fmt::NVFP4: code = k2e2m1[nib]; f = 0.5f * e4m3_to_f32(bs[c / 16]) * w.global_scale; return;
    case Fmt::INT4_SYM: code = nib - 8; f = fs[c / w.group]; return;
    default: code = nib - w.zero[r * w.scale_stride + c / w.group]; f = fs[c / w.group]; return;
  }
}

void rows_q8_scalar(const WeightMat& w, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < x.ntok; ++t) {
      const int8_t* q = x.q + t * x.ldq;
      float acc = 0.f;
      for (int64_t b = 0; b < w.cols / 32; ++b)
        for (int h = 0; h < 2; ++h) {  // halves of 16 columns: NVFP4's scale blocks
          int dot = 0;
          float f = 0.f;
          for (int i = 16 * h; i < 16 * h + 16; ++i) {
            int code;
            code_and_scale(w, r, 32 * b + i, code, f);
            dot += code * q[32 * b + (i % 2) * 16 + i / 2];
          }
          acc += static_cast<float>(dot) * (f * x.d[t * x.ldb + b]);
        }
      Y[t * ldy + (r - r0)] = acc;
    }
}

}  // namespace ft
