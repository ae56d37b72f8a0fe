// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for MXFP4_X16 (MXFP4 with 16 rows interleaved, GGUF MXFP4_MOE's
// and gpt-oss's experts, cpu/formats.h): rows in the lanes (x86_avx2_x16.h), for a bf16 engine on CPUs without a
// bf16 dot product (Zen 2/3, Intel desktops), where MXFP4 took fp32 products before (a table lookup to fp32 and FMAs:
// compute-bound from 4 tokens).
//
// e2m1 values times 2 are the integers 0, +-1, +-2, +-3, +-4, +-6, +-8, +-12, so a block's products with x's 16-bit
// codes are exact in int32: the decoder (X16E2m1) gives each weight as 2 e2m1 + 12 (0..24, so that a byte-to-word
// step is a mask or a shift), and x16_dot_block sums a block of 8 rows in int32 exactly (|sum| < 32 * 24 * 2^15 <
// 2^25: its conversion to fp32 rounds at most once, by <= 2^-24 of it). The row's e8m0 scale 2^(e - 127) times dx / 2
// then takes the block in one FMA and the offset 12 (6 sx: dx times x's sum of codes, times 6) in one more: both
// scales are powers of two, exact bar under- or overflow.
//
// Per 256 weights (8 rows, one block) and token: 16 `vpmaddwd` and 16 `vpaddd` after 4 loads, 20 shuffles, shifts
// and masks and 16 dword broadcasts (shared by the two halves up to 2 tokens), and 2 FMAs.
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_avx2_x16.h"  // x16_rows_i16, x16_dot_block, X16E2m1

namespace ft {
namespace {

struct Mxfp4X16 {
  static constexpr int kTokens = kX16Tokens;  // tokens a tile at most
  // 2^(e - 127) of rows r + 8h..+7 for block j, from their e8m0 bytes (e = 0: 2^-127, a subnormal; 255: Inf).
  static __m256 scales(const WeightMat& m, int64_t r, int64_t j, int h) {
    const uint8_t* e = static_cast<const uint8_t*>(m.scale) + nib_x16_scale_at(m.scale_stride, r, j) + 8 * h;
    const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e))), 23);
    return _mm256_castsi256_ps(_mm256_max_epu32(bits, _mm256_set1_epi32(0x00400000)));
  }

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
        x16_dot_block<NT, H, X16E2m1>(q + 256 * j, h0, xo + 32 * j, ldo, acc);
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const __m256 s = scales(m, r, j, h0 + h);
          FT_UNROLL for (int t = 0; t < NT; ++t) {
            const int64_t b = t * nb + j;
            y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(s, _mm256_set1_ps(0.5f * dx[b])), y[h][t]);
            y[h][t] = _mm256_fnmadd_ps(s, _mm256_set1_ps(6.f * sx[b]), y[h][t]);
          }
        }
      }
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t)
          _mm256_storeu_ps(Y + t * ldy + 8 * (h0 + h), y[h][t]);
    }
  }
};

}  // namespace

void FT_X16_NAME(rows_q16_mxfp4x16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<Mxfp4X16>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
