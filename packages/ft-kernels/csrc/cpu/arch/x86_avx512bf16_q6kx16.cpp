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
#include "cpu/arch/x86_avx512bf16_x16.h"  // x16_rows, kX16Ahead

namespace ft {
namespace {

struct Q6kX16 {
  static constexpr bool kSums = false;

  // Rows r..r+15 of m (one group of 16: its tiles, one per super-block) against NT tokens: Y[t * ldy + i] = row
  // r + i . token t.
  template <int NT>
  static void group(const WeightMat& m, int64_t r, const uint16_t* xo, int64_t ldo, const float*, float* Y, int64_t ldy) {
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK;
    constexpr int C = NT == 1 ? 4 : NT == 2 ? 2 : 1;  // dot-product chains a token and sub-block
    constexpr int H = NT <= 4 ? 2 : 1;  // sub-blocks in flight: >= 6 chains, within the 32 registers
    // vpermi2w's tables: entry q (0..63; bit 5 picks the table) is bf16(q - 32)
    const __m512 q0 = _mm512_sub_ps(
        _mm512_cvtepi32_ps(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)), _mm512_set1_ps(32.f));
    auto plus = [&](float k) { return _mm512_add_ps(q0, _mm512_set1_ps(k)); };
    const __m512i tlo = (__m512i)_mm512_cvtne2ps_pbh(plus(16.f), q0), thi = (__m512i)_mm512_cvtne2ps_pbh(plus(48.f), plus(32.f));
    const __m512i m0 = _mm512_set1_epi16(0x000f), m1 = _mm512_set1_epi16(0x00f0), m2 = _mm512_set1_epi16(0x0f00);
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* tile = g + s * kX16Q6Tile;
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 3328)));
      _mm_prefetch(reinterpret_cast<const char*>(tile) + 3328 + kX16Ahead, _MM_HINT_T1);
      for (int jb = 0; jb < 16; jb += H) {  // sub-blocks jb .. jb + H - 1 (16 columns each), side by side
        if (jb % 4 == 0) _mm_prefetch(reinterpret_cast<const char*>(tile) + 3072 + 16 * jb + kX16Ahead, _MM_HINT_T1);
        __m512 acc[H][NT][C];
        FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) FT_UNROLL for (int c = 0; c < C; ++c)
            acc[h][t][c] = _mm512_setzero_ps();
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const int j = jb + h;
          const uint8_t* hq = tile + 2048 + 64 * j;
          _mm_prefetch(reinterpret_cast<const char*>(hq) + kX16Ahead, _MM_HINT_T1);
          const __m512i hv = _mm512_loadu_si512(hq);
          FT_UNROLL for (int e = 0; e < 2; ++e) {
            const int p = 2 * j + e;  // columns 8p..8p+7 of the super-block
            const uint8_t* q = tile + 64 * p;
            _mm_prefetch(reinterpret_cast<const char*>(q) + kX16Ahead, _MM_HINT_T1);
            const __m512i v = _mm512_loadu_si512(q), he = e ? _mm512_srli_epi16(hv, 2) : hv;
            __m512i idx[4];  // code of nibble k in bits 0..5 (vpermi2w reads no more)
            idx[0] = _mm512_ternarylogic_epi32(v, he, m0, 0xe4);  // m ? v : he
            idx[1] = _mm512_srli_epi16(_mm512_ternarylogic_epi32(v, he, m1, 0xe4), 4);
            idx[2] = _mm512_srli_epi16(_mm512_ternarylogic_epi32(v, he, m2, 0xe4), 8);
            idx[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 12), _mm512_slli_epi16(he, 4), m0, 0xe4);
            FT_UNROLL for (int k = 0; k < 4; ++k) {
              const __m512bh w = (__m512bh)_mm512_permutex2var_epi16(tlo, idx[k], thi);
              FT_UNROLL for (int t = 0; t < NT; ++t) {
                const __m512bh x = (__m512bh)_mm512_set1_epi32(
                    *reinterpret_cast<const int32_t*>(xo + t * ldo + kQK * s + 8 * p + 2 * k));
                acc[h][t][(4 * e + k) % C] = _mm512_dpbf16_ps(acc[h][t][(4 * e + k) % C], w, x);
              }
            }
          }
        }
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 3072 + 16 * (jb + h)));
          const __m512 dsc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)));
          FT_UNROLL for (int t = 0; t < NT; ++t) {
            __m512 a = acc[h][t][0];
            FT_UNROLL for (int c = 1; c < C; ++c) a = _mm512_add_ps(a, acc[h][t][c]);
            y[t] = _mm512_fmadd_ps(a, dsc, y[t]);
          }
        }
      }
    }
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

}  // namespace

void rows_bf16act_q6kx16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                    int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<Q6kX16>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
