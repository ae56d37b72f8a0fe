// AVX-512, NVFP4 weights (e2m1 codes, one e4m3 scale per 16 columns, a global scale): the table kernel of
// x86_avx512_lut4.h; a chunk's 8 block scales come from one 8-lane gather and are spread over lane pairs.
#include <array>

#include "cpu/arch/x86_avx512_lut4.h"

namespace ft {
namespace {
const std::array<float, 256> kE4m3 = [] {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = e4m3_to_f32(static_cast<uint8_t>(i));
  return t;
}();

struct Nvfp4Lut {
  static constexpr bool kZero = false;
  static __m512 lut() { return _mm512_setr_ps(0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f); }
  static __m512 scales(const WeightMat& m, int64_t row, int64_t k) {  // eight blocks of 16 per chunk
    const uint8_t* s = static_cast<const uint8_t*>(m.scale) + row * m.scale_stride + 8 * k;
    const int64_t n = std::min<int64_t>(8, m.scale_stride - 8 * k);
    const __m128i b = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << n) - 1), s);
    const __m256 v = _mm256_i32gather_ps(kE4m3.data(), _mm256_cvtepu8_epi32(b), 4);
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), _mm512_castps256_ps512(v));
  }
  static __m512 zeros(const WeightMat&, int64_t, int64_t) { return _mm512_setzero_ps(); }
  static float post(const WeightMat& m) { return m.global_scale; }
};
}  // namespace

void rows_nvfp4_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                       int64_t ldy) {
  avx512_lut4::rows<Nvfp4Lut>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
