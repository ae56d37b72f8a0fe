// AVX2, FP8 e4m3 weights with fp32 scales per `group` columns. 16 weights a step: one load sign-extends the 16
// bytes to 16-bit words (s...s b), so the dword of lane i holds columns c + 2i (low word) and c + 2i + 1 (high).
// << 20 puts the low word's b6..b0 at bits 26..20 (the even column), << 4 the high word's; either way bit 31 and
// bits 30..27 hold copies of that byte's sign, and the mask 0x87f00000 clears bits 30..27 and all else: the fp32
// bits of the e4m3 value times 2^-120 (exact for normals and, as fp32 subnormals, for e4m3 subnormals). Five
// instructions for 16 weights (three a vector of 8 when each was sign-extended to 32 bits: one Zen 5 core, in
// cache, 28 -> 31.5 GB/s); x comes permuted to match (even columns, then odd ones) and times 2^60, and 2^60 is
// folded into the group scale, so products stay normal. Caveats: with MXCSR.DAZ set (torch.set_flush_denormal(True)
// on the thread that created the pool) e4m3 subnormal weights read as 0; |x| > 2^68 overflows; the e4m3 NaN codes
// 0x7f/0xff decode as +-480.
#include "cpu/arch/x86_avx2.h"

namespace ft {
namespace {
struct Fp8Avx2 : Fp8Common {
  static constexpr bool kPrep = true, kPerm = true;
  static constexpr float kXLo = 1152921504606846976.f, kXHi = kXLo, kScaleMul = kXLo;  // 2^60
  static void decode(const uint8_t* row, int64_t c, __m256& w0, __m256& w1) {
    const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c)));
    const __m256i mask = _mm256_set1_epi32(static_cast<int>(0x87f00000u));
    w0 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(v, 20), mask));  // columns c, c+2, ...
    w1 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(v, 4), mask));   // c+1, c+3, ...
  }
};
}  // namespace

void rows_fp8_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                   int64_t ldy) {
  group_rows<Avx2, Fp8Avx2>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
