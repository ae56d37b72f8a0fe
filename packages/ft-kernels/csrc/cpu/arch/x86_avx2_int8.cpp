// AVX2, INT8 weights with fp32 scales per `group` columns (GGUF Q8_0 is group 32): 8 columns per vector,
// bytes sign-extended to 32 bits and converted to fp32 (exact); the fp8 files' group loop.
#include "cpu/arch/x86_avx2.h"

namespace ft {
namespace {
struct Int8Avx2 : Fp8Common {
  static constexpr float kScaleMul = 1.f;
  static __m256 f32(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static void decode(const uint8_t* row, int64_t c, __m256& w0, __m256& w1) {
    w0 = f32(row + c);      // columns c..c+7
    w1 = f32(row + c + 8);  // columns c+8..c+15
  }
};
}  // namespace

void rows_int8_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  group_rows<Avx2, Int8Avx2>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
