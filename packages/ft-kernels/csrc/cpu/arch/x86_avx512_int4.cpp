// AVX-512, INT4 weights (sym: zero 8; asym: uint8 zeros) with fp32 scales per `group` columns. Groups of 32,
// 64 or a multiple of 128 columns (ft's experts: 128, dense: 32) take the table kernel of x86_avx512_lut4.h
// (table q - 8, or q and zero * sum(x) subtracted per lane); others the decode of x86_avx2_int4.cpp on 32
// columns (16 bytes): bytes zero-extended to 32-bit lanes, the low nibble (q) and the high nibble masked in
// place (16q) converted exactly with vcvtdq2ps; prep_x orders x to match (even / odd columns, the odd ones
// divided by 16). Per group: scale * (sum(q x) - zero * sum(x)).
#include "cpu/arch/x86_avx512.h"
#include "cpu/arch/x86_avx512_lut4.h"

namespace ft {
namespace {
struct Int4Avx512 : Int4Common {
  static constexpr float kXLo = 1.f, kXHi = 1.f / 16.f;
  static void decode(const uint8_t* row, int64_t c, __m512& w0, __m512& w1) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2)));
    w0 = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(0x0f)));  // columns c, c+2, ..., c+30
    w1 = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(0xf0)));  // columns c+1, ..., c+31 (x16)
  }
};
}  // namespace

void rows_int4_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                      int64_t ldy) {
  if (int4_lane_groups(m.group))
    avx512_nib::with_int4_lanes<avx512_nib::Int4Lanes>(
        m, [&](auto d) { avx512_lut4::rows<decltype(d)>(m, r0, r1, X, ntok, ldx, Y, ldy); });
  else
    group_rows<Avx512, Int4Avx512>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
