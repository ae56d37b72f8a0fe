// AVX2, INT4 weights (sym: zero 8; asym: uint8 zeros) with fp32 scales per `group` columns.
// Decode 16 columns (8 bytes): zero-extend the bytes to 32-bit lanes; the low nibble masked (q) and the high
// nibble masked in place (16q) convert exactly with vcvtdq2ps; prep_x gives x in the matching even/odd
// order with the high half pre-divided by 16. Per group: scale * (sum(q x) - zero * sum(x)).
#include "cpu/arch/x86_avx2.h"

namespace ft {
namespace {
struct Int4Avx2 : Int4Common {
  static constexpr float kXLo = 1.f, kXHi = 1.f / 16.f;
  static void decode(const uint8_t* row, int64_t c, __m256& w0, __m256& w1) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2)));
    w0 = _mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(0x0f)));  // columns c, c+2, ..., c+14
    w1 = _mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(0xf0)));  // columns c+1, ..., c+15 (x16)
  }
};
}  // namespace

void rows_int4_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  group_rows<Avx2, Int4Avx2>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
