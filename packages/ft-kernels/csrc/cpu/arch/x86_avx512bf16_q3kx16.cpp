// AVX-512 BF16, bf16 activations (cpu/bf16act.h) for Q3_K_X16 (Q3_K with 16 rows interleaved, cpu/formats.h): rows
// in the lanes, as the Q4_K_X16 and Q6_K_X16 kernels (x86_avx512bf16_q4kx16.cpp, _q6kx16.cpp).
//
// The row-wise Q3_K kernel (x86_avx512bf16_kquant.cpp) joins each code's 2 low bits and its high bit with column
// shuffles and ends each row in a horizontal sum; one Zen 4 core runs it at ~9 GB/s from DRAM at one token. Here
// lane i is row i of the group. One 64-byte load holds the low 2 bits of a sub-block (16 columns, one scale) of
// 16 rows: 8 codes a 16-bit word. One more holds the high bits of two sub-blocks, placed so that, for code k of
// the low word, a ternary-logic select (the 2 bits from the low word, the rest from the high word shifted down by
// the sub-block's parity) and the shift down by 2k (for k = 7 a dword rotation by 14) leave the 3-bit code in the
// word's low bits; `vpermw` (5 index bits: a table of the 8 values repeated) turns it into bf16(code - 4),
// exactly, and `vdpbf16ps` takes x's column pair as one dword broadcast (x16_prep's order). A sub-block is 8
// products a token, scaled once by d (sc - 32) in one FMA: no sums of x. Two sub-blocks run side by side for up
// to 4 tokens, so a token has 8 (1 token), 4 (2) or 2 chains in flight.
//
// Per 256 weights and token: 8 `vdpbf16ps` and 1 FMA, after 8 selects, 7 shifts, 8 lookups and the sub-block's
// scale (6-bit, from two byte planes) shared by the tile's tokens. Codes and products are exact, so the result
// differs from the row-wise kernel's only in fp32 summation order.
#include <immintrin.h>

#include "cpu/arch/rows_common.h"         // FT_UNROLL
#include "cpu/arch/x86_avx512bf16_x16.h"  // x16_rows, Sub16X16, kX16Ahead
#include "cpu/arch/x86_kq_fields.h"       // x16_q3_scales6

namespace ft {
namespace {

// Sub16X16's decoder of Q3_K_X16: sub-block j is 1 load of low 2-bit fields and half a load of high bits.
struct Q3kX16 {
  static constexpr bool kUnroll = true;
  static constexpr int64_t kTile = kX16Q3Tile;
  __m512i lut;  // vpermw's table: entry q (5 bits; the code is the low 3) is bf16((q & 7) - 4)
  Q3kX16() {
    const __m512i q = _mm512_and_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                       _mm512_set1_epi32(7));
    const __m512 v = _mm512_sub_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(4.f));
    lut = (__m512i)_mm512_cvtne2ps_pbh(v, v);
  }
  static __m512 d(const uint8_t* tile) {  // and the scale planes and d prefetched
    FT_UNROLL for (int o = 1536; o < 1760; o += 64)
      x16_prefetch(reinterpret_cast<const char*>(tile) + o + kX16Ahead);
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 1728)));
  }
  // The 16 rows' d (sc_j - 32) of sub-block j (0..15).
  static __m512 scale(const uint8_t* tile, int j, __m512 d) {
    const __m512i sc = _mm512_cvtepu8_epi32(x16_q3_scales6(tile + 1536, j));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(sc, _mm512_set1_epi32(32))));
  }
  void decode(const uint8_t* tile, int j, __m512bh (&w)[8]) const {
    const uint8_t* lq = tile + 64 * j;
    const uint8_t* hq = tile + 1024 + 64 * (j / 2);
    x16_prefetch(reinterpret_cast<const char*>(lq) + kX16Ahead);
    if (j % 2 == 0) x16_prefetch(reinterpret_cast<const char*>(hq) + kX16Ahead);
    const __m512i v = _mm512_loadu_si512(lq), hw = _mm512_loadu_si512(hq);
    const __m512i hv = j % 2 ? _mm512_srli_epi16(hw, 1) : hw;  // code k's high bit at 2k + 2 (k < 7)
    FT_UNROLL for (int k = 0; k < 8; ++k) {
      const __m512i sel = _mm512_set1_epi16(static_cast<short>(3 << (2 * k)));
      const __m512i t = _mm512_ternarylogic_epi32(v, hv, sel, 0xe4);  // sel ? v : hv
      const __m512i idx = k == 7 ? _mm512_ror_epi32(t, 14) : k ? _mm512_srli_epi16(t, 2 * k) : t;
      w[k] = (__m512bh)_mm512_permutexvar_epi16(idx, lut);
    }
  }
};

}  // namespace

void rows_bf16act_q3kx16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                    int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<Sub16X16<Q3kX16>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
