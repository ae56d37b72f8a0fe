// AVX-512, FP8 e4m3 weights with fp32 scales per `group` columns; the decode of x86_avx2_fp8.cpp on 16
// columns per vector: sign-extend bytes to 32 bits, << 20, mask 0x87f00000 -> fp32 bits of the e4m3 value
// times 2^-120; x prepared times 2^60 and 2^60 folded into the scale. Same caveats as the AVX2 file (DAZ,
// |x| > 2^68, NaN codes read as +-480).
#include "cpu/arch/x86_avx512.h"

namespace ft {
namespace {
struct Fp8Avx512 : Fp8Common {
  static constexpr bool kPrep = true;
  static constexpr float kXLo = 1152921504606846976.f, kXHi = kXLo, kScaleMul = kXLo;  // 2^60
  static __m512 f32(const uint8_t* p) {
    const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(v, 20), _mm512_set1_epi32(static_cast<int>(0x87f00000u))));
  }
  static void decode(const uint8_t* row, int64_t c, __m512& w0, __m512& w1) {
    w0 = f32(row + c);       // columns c..c+15
    w1 = f32(row + c + 16);  // columns c+16..c+31
  }
};
}  // namespace

void rows_fp8_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  group_rows<Avx512, Fp8Avx512>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
