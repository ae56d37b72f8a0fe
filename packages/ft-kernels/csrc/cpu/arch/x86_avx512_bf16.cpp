// AVX-512, BF16 weights: widen 16 bf16 to fp32 (zero-extend + shift, exact), FMA against fp32 x.
#include "cpu/arch/x86_avx512.h"

namespace ft {
namespace {
struct Bf16Avx512 {
  static __m512 load(const uint8_t* row, int64_t c) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + c));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static float scalar(const uint8_t* row, int64_t c) { return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]); }
};
}  // namespace

void rows_bf16_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                      int64_t ldy) {
  dense_rows<Avx512, Bf16Avx512>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
