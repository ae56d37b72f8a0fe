#include "cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "cpu/dispatch.h"  // rms_norm_bf16_fn: the AVX2 build of the bf16 path
#include "cpu/formats.h"
#include "cpu/threadpool.h"

namespace ft {

namespace {
// Sum of squares with 16 independent partial sums (vectorisable; the order differs from torch's reduction
// only within fp32 rounding).
template <class Load>
inline float sum_sq(Load ld, int64_t D) {
  float p[16] = {};
  int64_t i = 0;
  for (; i + 16 <= D; i += 16)
    for (int j = 0; j < 16; ++j) {
      const float v = ld(i + j);
      p[j] += v * v;
    }
  for (; i < D; ++i) {
    const float v = ld(i);
    p[0] += v * v;
  }
  float s = 0.f;
  for (float v : p) s += v;
  return s;
}
}  // namespace

void rms_norm(const void* x, const void* w, bool bf16, int64_t rows, int64_t D, float eps, void* y, bool w_f32) {
  if (RmsNormBf16Fn fn = bf16 ? rms_norm_bf16_fn() : nullptr)
    return fn(static_cast<const uint16_t*>(x), w, w_f32, rows, D, eps, static_cast<uint16_t*>(y));
  for (int64_t r = 0; r < rows; ++r) {
    if (bf16) {
      const uint16_t* xr = static_cast<const uint16_t*>(x) + r * D;
      const uint16_t* wr = static_cast<const uint16_t*>(w);
      uint16_t* yr = static_cast<uint16_t*>(y) + r * D;
      const float s = sum_sq([&](int64_t i) { return bf16_to_f32(xr[i]); }, D);
      const float inv = 1.f / std::sqrt(s / static_cast<float>(D) + eps);
      if (w_f32) {
        const float* wf = static_cast<const float*>(w);
        for (int64_t i = 0; i < D; ++i) yr[i] = f32_to_bf16(bf16_to_f32(xr[i]) * inv * wf[i]);
        continue;
      }
      for (int64_t i = 0; i < D; ++i)
        yr[i] = f32_to_bf16(bf16_to_f32(wr[i]) * bf16_to_f32(f32_to_bf16(bf16_to_f32(xr[i]) * inv)));
    } else {
      const float* xr = static_cast<const float*>(x) + r * D;
      const float* wr = static_cast<const float*>(w);
      float* yr = static_cast<float*>(y) + r * D;
      const float s = sum_sq([&](int64_t i) { return xr[i]; }, D);
      const float inv = 1.f / std::sqrt(s / static_cast<float>(D) + eps);
      for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] * inv * wr[i];
    }
  }
}

void rms_norm_rows(const void* x, const void* w, bool bf16, int64_t rows, int64_t D, float eps, void* y, bool w_f32) {
  const int64_t esz = bf16 ? 2 : 4, per = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(D, 1));  // ~32K elements a task
  if (rows * D < (1 << 16)) return rms_norm(x, w, bf16, rows, D, eps, y, w_f32);
  ThreadPool::get().run((rows + per - 1) / per, [&](int64_t b) {
    const int64_t r0 = b * per, n = std::min(rows, r0 + per) - r0;
    rms_norm(static_cast<const char*>(x) + r0 * D * esz, w, bf16, n, D, eps, static_cast<char*>(y) + r0 * D * esz, w_f32);
  });
}

}  // namespace ft
