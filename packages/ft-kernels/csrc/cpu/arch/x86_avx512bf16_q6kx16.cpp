// AVX-512 BF16, bf16 activations (cpu/bf16act.h) for Q6_K_X16 (Q6_K with 16 rows interleaved, cpu/formats.h): rows
// in the lanes, as the Q4_K_X16 kernel (x86_avx512bf16_q4kx16.cpp).
//
// The row-wise Q6_K kernel (x86_avx512bf16_kquant.cpp) joins each weight's low nibble and high 2 bits with column
// shuffles and ends each row in a horizontal sum; one Zen 4 core runs it at ~15 GB/s from DRAM at one token, bound
// by those instructions. Here lane i is row i of the group. One 64-byte load holds 8 columns' low nibbles of 16 rows
// (as Q4_K_X16), one more holds the high 2 bits of 16 columns: in each 16-bit word, the field of nibble k of the
// matching low-bit word sits 4 bits above that nibble (k < 3), or at the word's bottom (k = 3), for the even group
// of 8 columns, and 2 bits higher for the odd one (shifted down by 2 first). So one ternary-logic select (the
// nibble where a mask has it, else the high bits), a shift (k > 0) and `vpermi2w` over two 32-entry tables turn a
// 6-bit code into the bf16 of q - 32, exactly; `vdpbf16ps` takes x's column pair as one dword broadcast (the
// order of x16_prep). A sub-block of 16 columns (one int8 scale a row) is 8 products a token, scaled once by
// d sc_i in one FMA. Two sub-blocks run side by side for up to 4 tokens, so a token has 8 (1 token), 4 (2) or
// 2 independent chains in flight.
//
// Per 256 weights and token: 8 `vdpbf16ps` and 1 FMA, after 8 selects, ~7 shifts and 8 `vpermi2w` shared by the
// tile's tokens. Codes and products are exact; sums round in fp32 in another order than the row-wise kernel's,
// within the same bound (fp32_bounds.kquant_terms).
#include <immintrin.h>

#include "cpu/arch/rows_common.h"         // FT_UNROLL
#include "cpu/arch/x86_avx512bf16_x16.h"  // x16_rows, Sub16X16, kX16Ahead

namespace ft {
namespace {

// Sub16X16's decoder of Q6_K_X16: sub-block j is 2 loads of low nibbles and 1 of high 2-bit fields.
struct Q6kX16 {
  static constexpr bool kUnroll = false;
  static constexpr int64_t kTile = kX16Q6Tile;
  __m512i tlo, thi;  // vpermi2w's tables: entry q (0..63; bit 5 picks the table) is bf16(q - 32)
  __m512i m0 = _mm512_set1_epi16(0x000f), m1 = _mm512_set1_epi16(0x00f0), m2 = _mm512_set1_epi16(0x0f00);
  Q6kX16() {
    const __m512 q0 = _mm512_sub_ps(
        _mm512_cvtepi32_ps(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)), _mm512_set1_ps(32.f));
    auto plus = [&](float k) { return _mm512_add_ps(q0, _mm512_set1_ps(k)); };
    tlo = (__m512i)_mm512_cvtne2ps_pbh(plus(16.f), q0), thi = (__m512i)_mm512_cvtne2ps_pbh(plus(48.f), plus(32.f));
  }
  static __m512 d(const uint8_t* tile) {
    x16_prefetch(reinterpret_cast<const char*>(tile) + 3328 + kX16Ahead);
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 3328)));
  }
  static __m512 scale(const uint8_t* tile, int j, __m512 d) {  // d sc_j, sc_j int8 at 3072 + 16j
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 3072 + 16 * j));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)));
  }
  void decode(const uint8_t* tile, int j, __m512bh (&w)[8]) const {
    if (j % 4 == 0) x16_prefetch(reinterpret_cast<const char*>(tile) + 3072 + 16 * j + kX16Ahead);
    const uint8_t* hq = tile + 2048 + 64 * j;
    x16_prefetch(reinterpret_cast<const char*>(hq) + kX16Ahead);
    const __m512i hv = _mm512_loadu_si512(hq);
    FT_UNROLL for (int e = 0; e < 2; ++e) {
      const uint8_t* q = tile + 64 * (2 * j + e);  // columns 8p..8p+7, p = 2j + e
      x16_prefetch(reinterpret_cast<const char*>(q) + kX16Ahead);
      const __m512i v = _mm512_loadu_si512(q), he = e ? _mm512_srli_epi16(hv, 2) : hv;
      __m512i idx[4];  // code of nibble k in bits 0..5 (vpermi2w reads no more)
      idx[0] = _mm512_ternarylogic_epi32(v, he, m0, 0xe4);  // m ? v : he
      idx[1] = _mm512_srli_epi16(_mm512_ternarylogic_epi32(v, he, m1, 0xe4), 4);
      idx[2] = _mm512_srli_epi16(_mm512_ternarylogic_epi32(v, he, m2, 0xe4), 8);
      idx[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 12), _mm512_slli_epi16(he, 4), m0, 0xe4);
      FT_UNROLL for (int k = 0; k < 4; ++k) w[4 * e + k] = (__m512bh)_mm512_permutex2var_epi16(tlo, idx[k], thi);
    }
  }
};

}  // namespace

void rows_bf16act_q6kx16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                    int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<Sub16X16<Q6kX16>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
