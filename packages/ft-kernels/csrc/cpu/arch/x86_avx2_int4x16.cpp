// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for INT4_SYM_X16 (INT4 with 16 rows interleaved, GGUF Q4_0 and
// `ft convert --format int4`, cpu/formats.h): rows in the lanes (x86_avx2_x16.h), for a bf16 engine on CPUs without
// a bf16 dot product.
//
// The row-wise 16-bit kernel (x86_avx2_q16.cpp's int4) scales each row's block on its own: a horizontal fold and a
// conversion per 32 weights. Here a block's exact int32 dots of 8 rows with the codes q (x16_dot_block), less 8
// times x's sum of codes for q - 8, take the rows' scales (one vector: 8 f16 or fp32 values of the group, 16 rows
// a block of the scale array) in two FMAs: s dx * dot - s * 8 sx (dx: the activation block's power-of-two scale, sx:
// dx times its sum of codes). Any group that is a multiple of 32 columns (Q4_0's 32, ft's 128).
//
// Per 256 weights (8 rows, one block) and token: 16 `vpmaddwd` and 16 `vpaddd`, after 4 loads, 12 shifts and masks
// and 16 dword broadcasts (shared by the two halves up to 2 tokens), and 2 FMAs.
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_avx2_x16.h"  // x16_rows_i16, x16_dot_block, x16_group_scales8

namespace ft {
namespace {

struct Int4X16 {
  static constexpr int kTokens = kX16Tokens;  // tokens a tile at most
  // Rows r..r+15 of m against NT tokens, H halves (8 rows each) a pass: Y[t * ldy + i] = row r + i . token t.
  template <int NT, int H>
  static void group(const WeightMat& m, int64_t r, const int16_t* xo, int64_t ldo, const float* dx, const float* sx,
                    float* Y, int64_t ldy) {
    const int64_t nb = m.cols / 32;
    const uint8_t* q = m.q + r * nb * 16;  // the group's blocks: 256 bytes each (16 rows x 32 columns)
    for (int h0 = 0; h0 < 2; h0 += H) {
      __m256 y[H][NT];
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) y[h][t] = _mm256_setzero_ps();
      for (int64_t j = 0; j < nb; ++j) {
        __m256i acc[H][NT];
        x16_dot_block<NT, H>(q + 256 * j, h0, xo + 32 * j, ldo, acc);
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const __m256 s = x16_group_scales8(m, r, j, h0 + h);
          FT_UNROLL for (int t = 0; t < NT; ++t) {
            const int64_t b = t * nb + j;
            y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(s, _mm256_set1_ps(dx[b])), y[h][t]);
            y[h][t] = _mm256_fnmadd_ps(s, _mm256_set1_ps(8.f * sx[b]), y[h][t]);
          }
        }
      }
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t)
          _mm256_storeu_ps(Y + t * ldy + 8 * (h0 + h), y[h][t]);
    }
  }
};

}  // namespace

void FT_X16_NAME(rows_q16_int4x16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<Int4X16>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
