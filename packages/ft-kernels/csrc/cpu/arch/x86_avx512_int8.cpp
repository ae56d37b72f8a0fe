// AVX-512, INT8 weights with fp32 scales per `group` columns (GGUF Q8_0 is group 32): 16 columns per
// vector, bytes sign-extended to 32 bits and converted to fp32 (exact); the fp8 files' group loop.
#include "cpu/arch/x86_avx512.h"

namespace ft {
namespace {
struct Int8Avx512 : Fp8Common {
  static constexpr float kScaleMul = 1.f;
  static __m512 f32(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void decode(const uint8_t* row, int64_t c, __m512& w0, __m512& w1) {
    w0 = f32(row + c);       // columns c..c+15
    w1 = f32(row + c + 16);  // columns c+16..c+31
  }
};
}  // namespace

void rows_int8_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                      int64_t ldy) {
  group_rows<Avx512, Int8Avx512>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
