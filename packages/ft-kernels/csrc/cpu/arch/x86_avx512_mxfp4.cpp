// AVX-512, MXFP4 weights (e2m1 codes, one e8m0 scale per 32 columns): the table kernel of x86_avx512_lut4.h.
#include <array>

#include "cpu/arch/x86_avx512_lut4.h"

namespace ft {
namespace {
const std::array<float, 256> kE8m0 = [] {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = e8m0_to_f32(static_cast<uint8_t>(i));
  return t;
}();

struct Mxfp4Lut {
  static constexpr bool kZero = false;
  static __m512 lut() { return _mm512_setr_ps(0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f); }
  static __m512 scales(const WeightMat& m, int64_t row, int64_t k) {  // four blocks of 32 per chunk
    const uint8_t* s = static_cast<const uint8_t*>(m.scale) + row * m.scale_stride + 4 * k;
    return avx512_lut4::quad_scales(kE8m0.data(), s, std::min<int64_t>(4, m.scale_stride - 4 * k));
  }
  static __m512 zeros(const WeightMat&, int64_t, int64_t) { return _mm512_setzero_ps(); }
  static float post(const WeightMat&) { return 1.f; }
};
}  // namespace

void rows_mxfp4_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                       int64_t ldy) {
  avx512_lut4::rows<Mxfp4Lut>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
