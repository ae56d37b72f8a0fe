// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for Q4_K_X16 (Q4_K with 16 rows interleaved, cpu/formats.h): rows in
// the lanes (x86_avx2_x16.h), for a bf16 engine on CPUs without a bf16 dot product.
//
// The row-wise 16-bit kernel (x86_avx2_q8kquant.cpp) puts a row's columns in the lanes: per sub-block it folds
// partial dot products with `vphaddd`, converts them, and unpacks that row's 6-bit scale and min (a quarter of its
// instructions). Here a sub-block's exact int32 dots of 8 rows (x16_dot_block) take one FMA by d sc_i dx and one by
// -dmin m_i sx (dx: the activation block's power-of-two scale, sx: dx times its sum of codes, Q16Act's d and sd;
// d sc_i and dmin m_i are exact in fp32). The 16 rows' scales come from the tile's byte planes once per two
// sub-blocks (x16_fields6), shared by the tile's tokens.
//
// Per 256 weights (8 rows, one sub-block) and token: 16 `vpmaddwd` and 16 `vpaddd`, after 4 loads, 12 shifts and
// masks and 16 dword broadcasts (shared by the two halves up to 2 tokens), and 2 FMAs.
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_avx2_x16.h"    // x16_rows_i16, x16_dot_block, kX16Ahead
#include "cpu/arch/x86_kq_fields.h"   // x16_fields6

namespace ft {
namespace {

// Rows 8h..8h+7 of 16 rows' bytes (a field a row), or f16 values, as fp32.
inline __m256 half_u8(const uint8_t* b, int h) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * h))));
}
inline __m256 half_f16(const uint8_t* p, int h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
}

struct Q4kX16 {
  static constexpr int kTokens = kX16Tokens;  // tokens a tile at most
  // Rows r..r+15 of m against NT tokens, H halves (8 rows each) a pass: Y[t * ldy + i] = row r + i . token t.
  // x: 16-bit codes (E = int16_t) or int8 (int8_t).
  template <int NT, int H, class E>
  static void group(const WeightMat& m, int64_t r, const E* xo, int64_t ldo, const float* dx, const float* sx,
                    float* Y, int64_t ldy) {
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK, nb = m.cols / 32;
    for (int h0 = 0; h0 < 2; h0 += H) {
      __m256 y[H][NT];
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) y[h][t] = _mm256_setzero_ps();
      for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* tile = g + s * kX16Tile;
        for (int jj = 0; jj < 4; ++jj) {  // a loop: unrolled, the group's code outgrew the caches
          // the tile's 4 lines past its codes (scales, d, dmin), which the code loads' prefetches skip
          _mm_prefetch(reinterpret_cast<const char*>(tile + 2048 + 64 * jj) + kX16Ahead, _MM_HINT_T1);
          alignas(16) uint8_t f[4][16];  // sc, m of sub-block jj; sc, m of jj + 4: in memory, out of the 16 registers
          {
            __m128i f0, f1, f2, f3;
            x16_fields6(tile + 2048, jj, f0, f1, f2, f3);
            _mm_store_si128(reinterpret_cast<__m128i*>(f[0]), f0);
            _mm_store_si128(reinterpret_cast<__m128i*>(f[1]), f1);
            _mm_store_si128(reinterpret_cast<__m128i*>(f[2]), f2);
            _mm_store_si128(reinterpret_cast<__m128i*>(f[3]), f3);
          }
          FT_UNROLL for (int hb = 0; hb < 2; ++hb) {
            const int j = jj + 4 * hb;  // sub-block: block 8s + j of x
            __m256i acc[H][NT];
            x16_dot_block<NT, H>(tile + 256 * j, h0, xo + kQK * s + 32 * j, ldo, acc);
            FT_UNROLL for (int h = 0; h < H; ++h) {
              const __m256 dsc = _mm256_mul_ps(half_f16(tile + 2240, h0 + h), half_u8(f[2 * hb], h0 + h));
              const __m256 dmn = _mm256_mul_ps(half_f16(tile + 2272, h0 + h), half_u8(f[2 * hb + 1], h0 + h));
              FT_UNROLL for (int t = 0; t < NT; ++t) {
                const int64_t b = t * nb + 8 * s + j;
                y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(dsc, _mm256_set1_ps(dx[b])), y[h][t]);
                y[h][t] = _mm256_fnmadd_ps(dmn, _mm256_set1_ps(sx[b]), y[h][t]);
              }
            }
          }
        }
      }
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t)
          _mm256_storeu_ps(Y + t * ldy + 8 * (h0 + h), y[h][t]);
    }
  }
};

}  // namespace

void FT_X16_NAME(rows_q16_q4kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<Q4kX16>(m, r0, r1, x, Y, ldy);
}
void FT_X16_NAME(rows_q8_q4kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  x16_rows_i8<Q4kX16>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
