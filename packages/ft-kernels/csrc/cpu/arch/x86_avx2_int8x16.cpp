// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for INT8_SYM_X16 (INT8 with 16 rows interleaved: GGUF Q8_0, the
// projections of MXFP4_MOE and Q8_0 files, cpu/formats.h): rows in the lanes (x86_avx2_x16.h), for a bf16 engine on
// CPUs without a bf16 dot product (Zen 2/3, Intel desktops), where INT8 took fp32 products before.
//
// Half a 64-byte load is 4 columns (4p..4p+3) of 8 rows, dword i row i's bytes. (v << 8) >> 8 (16-bit, arithmetic)
// is the pair of columns 4p and 4p + 2 sign-extended, v >> 8 the pair 4p + 1 and 4p + 3: in Q16Act's order (a block's
// 16 even columns, then its 16 odd ones) x's matching pairs are dword p of each half, so x is taken as it is
// (x16_copy_i16). `vpmaddwd` adds both products to lane i in int32: a block's sum is exact (|sum| < 32 * 128 * 2^15 =
// 2^27) and its conversion to fp32 rounds at most once (by <= 2^-24 of it); then one FMA by the rows' scales times dx.
//
// Per 256 weights (8 rows, one block) and token: 16 `vpmaddwd` and 16 `vpaddd` after 8 loads, 24 shifts and 16
// dword broadcasts (shared by the two halves up to 2 tokens), and 1 FMA.
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_avx2_x16.h"  // x16_rows_i16, x16_copy_i16, x16_group_scales8, kX16Ahead

namespace ft {
namespace {

struct Int8X16 {
  static constexpr int kTokens = kX16Tokens;  // tokens a tile at most
  // Rows r..r+15 of m against NT tokens, H halves (8 rows each) a pass: Y[t * ldy + i] = row r + i . token t.
  template <int NT, int H>
  static void group(const WeightMat& m, int64_t r, const int16_t* xo, int64_t ldo, const float* dx, const float* /*sx*/,
                    float* Y, int64_t ldy) {
    const int64_t nb = m.cols / 32;
    const uint8_t* q = m.q + r * m.cols;  // the group's blocks: 512 bytes each (16 rows x 32 columns)
    const X16ScaleAhead sa(m, r, 512, kX16Ahead);
    for (int h0 = 0; h0 < 2; h0 += H) {
      __m256 y[H][NT];
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) y[h][t] = _mm256_setzero_ps();
      for (int64_t j = 0; j < nb; ++j) {
        __m256i acc[H][NT];
        FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) acc[h][t] = _mm256_setzero_si256();
        const int16_t* xb = xo + 32 * j;
        _mm_prefetch(sa.at(j), _MM_HINT_T1);  // a block is at most a line of scales
#pragma GCC unroll 2
        for (int p = 0; p < 8; ++p) {
          const uint8_t* v0 = q + 512 * j + 64 * p;
          _mm_prefetch(reinterpret_cast<const char*>(v0) + kX16Ahead, _MM_HINT_T1);
          __m256i even[H], odd[H];
          FT_UNROLL for (int h = 0; h < H; ++h) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + 32 * (h0 + h)));
            even[h] = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);
            odd[h] = _mm256_srai_epi16(v, 8);
          }
          FT_UNROLL for (int t = 0; t < NT; ++t) {
            const __m256i xe = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xb + t * ldo + 2 * p));
            const __m256i xd = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xb + t * ldo + 16 + 2 * p));
            FT_UNROLL for (int h = 0; h < H; ++h) acc[h][t] = x16_mac(x16_mac(acc[h][t], even[h], xe), odd[h], xd);
          }
        }
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const __m256 s = x16_group_scales8(m, r, j, h0 + h);
          FT_UNROLL for (int t = 0; t < NT; ++t)
              y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(s, _mm256_set1_ps(dx[t * nb + j])), y[h][t]);
        }
      }
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t)
          _mm256_storeu_ps(Y + t * ldy + 8 * (h0 + h), y[h][t]);
    }
  }
};

}  // namespace

void FT_X16_NAME(rows_q16_int8x16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<Int8X16, x16_copy_i16>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
