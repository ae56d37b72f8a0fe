#include "cpu/rope.h"

#include "cpu/formats.h"

namespace ft {

namespace {
template <class T, class Load, class Store>
void rope_rows(const T* x, int64_t rows_per_t, int64_t T_, int64_t D, int64_t R, const float* cos, const float* sin,
               bool interleaved, T* y, Load ld, Store st) {
  const int64_t half = R / 2;
  for (int64_t t = 0; t < T_; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < rows_per_t; ++h) {
      const T* xr = x + (t * rows_per_t + h) * D;
      T* yr = y + (t * rows_per_t + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const float a = ld(xr[interleaved ? 2 * i : i]), b = ld(xr[interleaved ? 2 * i + 1 : half + i]);
        const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
        yr[i] = st(ac - bs);
        yr[half + i] = st(bc + as);
      }
      for (int64_t d = R; d < D; ++d) yr[d] = xr[d];
    }
  }
}
}  // namespace

void rope(const void* x, bool bf16, int64_t T, int64_t H, int64_t D, int64_t R, const float* cos, const float* sin,
          bool interleaved, void* y) {
  if (bf16)
    rope_rows(static_cast<const uint16_t*>(x), H, T, D, R, cos, sin, interleaved, static_cast<uint16_t*>(y),
              [](uint16_t v) { return bf16_to_f32(v); }, [](float v) { return f32_to_bf16(v); });
  else
    rope_rows(static_cast<const float*>(x), H, T, D, R, cos, sin, interleaved, static_cast<float*>(y),
              [](float v) { return v; }, [](float v) { return v; });
}

}  // namespace ft
