// Scalar kernels for every format: decode a row to fp32, then dot it with each token.
// The ground truth the SIMD files are tested against (with the torch references in Python).
#include <vector>

#include "cpu/formats.h"

namespace ft {

static inline const float* fscale(const WeightMat& w, int64_t r) {
  return static_cast<const float*>(w.scale) + r * w.scale_stride;
}
static inline const uint8_t* bscale(const WeightMat& w, int64_t r) {
  return static_cast<const uint8_t*>(w.scale) + r * w.scale_stride;
}

float weight_at(const WeightMat& w, int64_t r, int64_t c) {
  const uint8_t* q = w.q + r * w.q_stride;
  switch (w.fmt) {
    case Fmt::BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(q)[c]);
    case Fmt::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(q)[c]);
    case Fmt::FP8_E4M3: return e4m3_to_f32(q[c]) * fscale(w, r)[c / w.group];
    case Fmt::INT8_SYM: return static_cast<float>(static_cast<int8_t>(q[c])) * fscale(w, r)[c / w.group];
    case Fmt::MXFP4: return e2m1_to_f32(q[c / 2] >> (4 * (c & 1))) * e8m0_to_f32(bscale(w, r)[c / 32]);
    case Fmt::NVFP4: return e2m1_to_f32(q[c / 2] >> (4 * (c & 1))) * e4m3_to_f32(bscale(w, r)[c / 16]) * w.global_scale;
    case Fmt::INT4_SYM:
      return (static_cast<float>((q[c / 2] >> (4 * (c & 1))) & 0xf) - 8.f) * fscale(w, r)[c / w.group];
    case Fmt::INT4_ASYM: {
      float z = static_cast<float>(w.zero[r * w.scale_stride + c / w.group]);
      return (static_cast<float>((q[c / 2] >> (4 * (c & 1))) & 0xf) - z) * fscale(w, r)[c / w.group];
    }
    default: return 0.f;
  }
}

void rows_scalar(const WeightMat& w, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                 int64_t ldy) {
  thread_local std::vector<float> row;
  row.resize(w.cols);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) row[c] = weight_at(w, r, c);
    for (int64_t t = 0; t < ntok; ++t) {
      const float* x = X + t * ldx;
      float acc = 0.f;
      for (int64_t c = 0; c < w.cols; ++c) acc += row[c] * x[c];
      Y[t * ldy + (r - r0)] = acc;
    }
  }
}

}  // namespace ft
