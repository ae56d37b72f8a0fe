// AVX-512 + F16C, F16 weights: vcvtph2ps widens 16 halves to fp32 exactly (subnormals too), FMA against fp32 x.
#include "cpu/arch/x86_avx512.h"

namespace ft {
namespace {
struct F16Avx512 {
  static __m512 load(const uint8_t* row, int64_t c) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + c)));
  }
  static float scalar(const uint8_t* row, int64_t c) { return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]); }
};
}  // namespace

void rows_f16_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  dense_rows<Avx512, F16Avx512>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
