// AVX-512 BF16, bf16 activations (cpu/bf16act.h) for MXFP4_X16 (MXFP4 with 16 rows interleaved, cpu/formats.h): rows
// in the lanes.
//
// The row-wise kernel (x86_avx512bf16_lut4.h) puts columns in the lanes: per 128 weights it builds a lane-wise scale
// vector from 4 e8m0 bytes, adds two dot-product chains and scales them, and every row ends in a horizontal sum. Here
// lane i is row i of the group, so a block's 16 e8m0 scales are one vector. One 64-byte load is 8 columns of 16
// rows, in Q4_K_X16's nibble order (word 2i: row i's columns 8p + {0, 4, 1, 5}, word 2i + 1: 8p + {2, 6, 3, 7});
// `vpermw` reads only the low 5 bits of each word, so (word >> 4k) indexes a 32-entry table (the 16 e2m1 values as
// bf16, twice) directly, and `vdpbf16ps` takes x's matching column pair as one dword broadcast (x16_prep's order).
// Per 512 weights (one block of 16 rows) and token: 16 `vdpbf16ps`, after 12 shifts and 16 lookups shared by the
// tile's tokens; then one FMA with the block's scales. Blocks run side by side, with 1-2 chains each, so a token
// has 8 (1, 2 tokens) or 2-4 dot-product chains in flight.
//
// Every e2m1 value is exact in bf16, each product with a bf16 x exact in fp32, and the power-of-two scale exact (bar
// under- or overflow), so the result differs from the row-wise kernel's only in fp32 summation order. One Zen 4
// core, [73728, 2048] from DRAM (a standalone loop, T = 1): ~45 GMAC/s against ~32 for the row-wise kernel; in L2 ~50.
#include <immintrin.h>

#include "cpu/arch/rows_common.h"         // FT_UNROLL
#include "cpu/arch/x86_avx512_nib.h"      // e2m1_lut
#include "cpu/arch/x86_avx512bf16_x16.h"  // x16_rows, kX16Ahead

namespace ft {
namespace {

struct Mxfp4X16 {
  static constexpr bool kSums = false;

  // 16 rows' e8m0 bytes -> 2^(e - 127) in fp32 (e = 0: 2^-127, subnormal).
  static __m512 scales(const uint8_t* s) {
    const __m512i e = _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))), 23);
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(e, _mm512_testn_epi32_mask(e, e), _mm512_set1_epi32(0x00400000)));
  }

  // B blocks from block 0 of q / s / xo (per token t at xo + t * ldo), C chains each and token, into y.
  template <int NT, int B, int C>
  static void blocks(const uint8_t* q, const uint8_t* s, const uint16_t* xo, int64_t ldo, __m512i lut, __m512 (&y)[NT]) {
    __m512 acc[B][NT][C];
    FT_UNROLL for (int b = 0; b < B; ++b) FT_UNROLL for (int t = 0; t < NT; ++t) FT_UNROLL for (int c = 0; c < C; ++c)
        acc[b][t][c] = _mm512_setzero_ps();
    FT_UNROLL for (int p = 0; p < 4; ++p) FT_UNROLL for (int b = 0; b < B; ++b) {
      const uint8_t* v0 = q + 256 * b + 64 * p;  // columns 32 b + 8p .. + 7 of the 16 rows
      _mm_prefetch(reinterpret_cast<const char*>(v0) + kX16Ahead, _MM_HINT_T1);
      const __m512i v = _mm512_loadu_si512(v0);
      FT_UNROLL for (int k = 0; k < 4; ++k) {
        const __m512bh w = (__m512bh)_mm512_permutexvar_epi16(k ? _mm512_srli_epi16(v, 4 * k) : v, lut);
        FT_UNROLL for (int t = 0; t < NT; ++t) {
          const __m512bh x = (__m512bh)_mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + 32 * b + 8 * p + 2 * k));
          acc[b][t][(4 * p + k) % C] = _mm512_dpbf16_ps(acc[b][t][(4 * p + k) % C], w, x);
        }
      }
    }
    FT_UNROLL for (int b = 0; b < B; ++b) {
      const __m512 sc = scales(s + 16 * b);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        __m512 a = acc[b][t][0];
        FT_UNROLL for (int c = 1; c < C; ++c) a = _mm512_add_ps(a, acc[b][t][c]);
        y[t] = _mm512_fmadd_ps(a, sc, y[t]);
      }
    }
  }

  // Rows r..r+15 of m against NT tokens: Y[t * ldy + i] = row r + i . token t.
  template <int NT>
  static void group(const WeightMat& m, int64_t r, const uint16_t* xo, int64_t ldo, const float*, float* Y, int64_t ldy) {
    constexpr int B = NT == 1 ? 4 : NT <= 3 ? 2 : 1;  // blocks side by side
    constexpr int C = NT <= 2 ? 2 : 1;                // chains a block and token: 8 in flight at 1 and 2 tokens
    const int64_t nb = m.cols / 32;
    const uint8_t* q = m.q + r * (m.cols / 2);                                // the group's blocks, 256 B each
    const uint8_t* s = static_cast<const uint8_t*>(m.scale) + r * nb;         // and their scales, 16 B each
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(avx512_nib::e2m1_lut());
    const __m512i lut = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);  // the 16 values twice: 5 index bits
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + B <= nb; j += B) blocks<NT, B, C>(q + 256 * j, s + 16 * j, xo + 32 * j, ldo, lut, y);
    for (; j < nb; ++j) blocks<NT, 1, C>(q + 256 * j, s + 16 * j, xo + 32 * j, ldo, lut, y);
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

}  // namespace

void rows_bf16act_mxfp4x16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                      int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<Mxfp4X16>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
