// AVX2 + FMA, BF16 weights: widen 8 bf16 to fp32 (zero-extend + shift, exact), FMA against fp32 x.
#include "cpu/arch/x86_avx2.h"

namespace ft {
namespace {
struct Bf16Avx2 {
  static __m256 load(const uint8_t* row, int64_t c) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + c));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float scalar(const uint8_t* row, int64_t c) { return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]); }
};
}  // namespace

void rows_bf16_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  dense_rows<Avx2, Bf16Avx2>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
