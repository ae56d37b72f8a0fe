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
#include "cpu/arch/x86_avx512bf16_x16.h"  // x16_rows, kX16Ahead

namespace ft {
namespace {

struct Q3kX16 {
  static constexpr bool kSums = false;

  // The 16 rows' d (sc_j - 32) of sub-block j (0..15) of tile t: sc_j's low 4 bits in nibble j / 8 of byte plane
  // j % 8, its high 2 bits at bit 2 (j / 4) of plane 8 + j % 4 (planes of 16 rows at 1536 + 16k).
  static __m512 scale(const uint8_t* t, int j, __m512 d) {
    auto ld = [&](int k) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 1536 + 16 * k)); };
    const __m128i a = ld(j % 8), b = ld(8 + j % 4);
    const __m128i lo = _mm_and_si128(j < 8 ? a : _mm_srli_epi16(a, 4), _mm_set1_epi8(15));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 2 * (j / 4)), _mm_set1_epi8(3));
    const __m512i sc = _mm512_cvtepu8_epi32(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(sc, _mm512_set1_epi32(32))));
  }

  // Rows r..r+15 of m (one group of 16: its tiles, one per super-block) against NT tokens: Y[t * ldy + i] = row
  // r + i . token t.
  template <int NT>
  static void group(const WeightMat& m, int64_t r, const uint16_t* xo, int64_t ldo, const float*, float* Y, int64_t ldy) {
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK;
    constexpr int C = NT == 1 ? 4 : NT == 2 ? 2 : 1;  // dot-product chains a token and sub-block
    constexpr int H = NT <= 4 ? 2 : 1;                // sub-blocks in flight
    // vpermw's table: entry q (5 bits; the code is the low 3) is bf16((q & 7) - 4)
    const __m512 v8 = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_and_epi32(
                                        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(7))),
                                    _mm512_set1_ps(4.f));
    const __m512i lut = (__m512i)_mm512_cvtne2ps_pbh(v8, v8);
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* tile = g + s * kX16Q3Tile;
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 1728)));
      _mm_prefetch(reinterpret_cast<const char*>(tile) + 1536 + kX16Ahead, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(tile) + 1600 + kX16Ahead, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(tile) + 1664 + kX16Ahead, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(tile) + 1728 + kX16Ahead, _MM_HINT_T1);
      FT_UNROLL for (int jb = 0; jb < 16; jb += H) {  // sub-blocks jb .. jb + H - 1 (16 columns each), side by side
        __m512 acc[H][NT][C];
        FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) FT_UNROLL for (int c = 0; c < C; ++c)
            acc[h][t][c] = _mm512_setzero_ps();
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const int j = jb + h;
          const uint8_t* lq = tile + 64 * j;
          const uint8_t* hq = tile + 1024 + 64 * (j / 2);
          _mm_prefetch(reinterpret_cast<const char*>(lq) + kX16Ahead, _MM_HINT_T1);
          if (j % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(hq) + kX16Ahead, _MM_HINT_T1);
          const __m512i v = _mm512_loadu_si512(lq), hw = _mm512_loadu_si512(hq);
          const __m512i hv = j % 2 ? _mm512_srli_epi16(hw, 1) : hw;  // code k's high bit at 2k + 2 (k < 7)
          FT_UNROLL for (int k = 0; k < 8; ++k) {
            const __m512i sel = _mm512_set1_epi16(static_cast<short>(3 << (2 * k)));
            const __m512i t = _mm512_ternarylogic_epi32(v, hv, sel, 0xe4);  // sel ? v : hv
            const __m512i idx = k == 7 ? _mm512_ror_epi32(t, 14) : k ? _mm512_srli_epi16(t, 2 * k) : t;
            const __m512bh w = (__m512bh)_mm512_permutexvar_epi16(idx, lut);
            FT_UNROLL for (int tk = 0; tk < NT; ++tk) {
              const __m512bh x =
                  (__m512bh)_mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xo + tk * ldo + kQK * s + 16 * j + 2 * k));
              acc[h][tk][k % C] = _mm512_dpbf16_ps(acc[h][tk][k % C], w, x);
            }
          }
        }
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const __m512 dsc = scale(tile, jb + h, d);
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

void rows_bf16act_q3kx16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                    int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<Q3kX16>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
