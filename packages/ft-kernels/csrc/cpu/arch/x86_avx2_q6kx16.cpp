// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for Q6_K_X16 (Q6_K with 16 rows interleaved: Q4_K_M files' down
// projections in every other layer, value projections and LM head, cpu/formats.h): rows in the lanes
// (x86_avx2_x16.h), for a bf16 engine on CPUs without a bf16 dot product. Built with AVX-VNNI only (CMakeLists.txt,
// dispatch.cpp): there it beats the row-wise 16-bit kernel (x86_avx2_q8kquant.cpp), whose per-row folds bound it; in
// AVX2 code the code assembly below costs what the folds do.
//
// A half-load of low nibbles is 8 columns of 8 rows (as Q4_K_X16's); the 16-bit word of high 2-bit fields for the
// same row and word holds nibble k's field 4 bits above that nibble (k < 3) or at the bottom (k = 3), 2 bits higher
// for the odd group of 8 columns (shifted down by 2 first). So nibble k's pair of 6-bit codes q is (v & 0xf << 4k |
// he & 0x30 << 4k) >> 4k (k = 3: v >> 12 | (he & 3) << 4), and q - 32 (-32..31) meets x's pair in `vpmaddwd` (or
// `vpdpwssd`). A sub-block of 16 columns sums exactly in int32 (|sum| <= 16 * 32 * 32767 < 2^24, so its conversion
// is exact too) and takes one FMA by d sc_i dx (d sc_i exact in fp32, dx a power of two).
//
// Per 256 weights (8 rows, 16 columns, one sub-block) and token: 8 `vpmaddwd` + 8 `vpaddd` (or 8 `vpdpwssd`) and 1
// FMA, after 3 loads and ~40 masks, shifts, ors and subtractions shared by the tile's tokens.
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_avx2_x16.h"  // x16_rows_i16, x16_mac, kX16Ahead

namespace ft {
namespace {

struct Q6kX16 {
  static constexpr int kTokens = kX16Tokens;  // tokens a tile at most

  // q - 32 of nibble k's pair of columns, from a half-load v of low nibbles and he, the high fields (already shifted
  // down by 2 for the odd group of 8 columns).
  static __m256i word(int k, const __m256i& v, const __m256i& he) {
    const __m256i c = k == 3 ? _mm256_or_si256(_mm256_srli_epi16(v, 12),
                                               _mm256_slli_epi16(_mm256_and_si256(he, _mm256_set1_epi16(0x0003)), 4))
                             : _mm256_srli_epi16(_mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi16(0x000f << 4 * k)),
                                                                 _mm256_and_si256(he, _mm256_set1_epi16(0x0030 << 4 * k))),
                                                 4 * k);
    return _mm256_sub_epi16(c, _mm256_set1_epi16(32));
  }

  // Rows r..r+15 of m against NT tokens, H halves (8 rows each) a pass: Y[t * ldy + i] = row r + i . token t.
  template <int NT, int H>
  static void group(const WeightMat& m, int64_t r, const int16_t* xo, int64_t ldo, const float* dx, const float* /*sx*/,
                    float* Y, int64_t ldy) {
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK, nb = m.cols / 32;
    for (int h0 = 0; h0 < 2; h0 += H) {
      __m256 y[H][NT];
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) y[h][t] = _mm256_setzero_ps();
      for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* tile = g + s * kX16Q6Tile;
        __m256 d[H];
        FT_UNROLL for (int h = 0; h < H; ++h)
            d[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 3328 + 16 * (h0 + h))));
#pragma GCC unroll 1
        for (int j = 0; j < 16; ++j) {  // sub-block j: columns 16j..16j+15 of the super-block
          if (j % 4 == 0) _mm_prefetch(reinterpret_cast<const char*>(tile + 3072 + 16 * j) + kX16Ahead, _MM_HINT_T1);
          const uint8_t* hq = tile + 2048 + 64 * j;
          _mm_prefetch(reinterpret_cast<const char*>(hq) + kX16Ahead, _MM_HINT_T1);
          __m256i acc[H][NT], hv[H];
          FT_UNROLL for (int h = 0; h < H; ++h) {
            hv[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hq + 32 * (h0 + h)));
            FT_UNROLL for (int t = 0; t < NT; ++t) acc[h][t] = _mm256_setzero_si256();
          }
          FT_UNROLL for (int e = 0; e < 2; ++e) {
            const int64_t p = 2 * j + e;  // columns 8p..8p+7
            const uint8_t* q = tile + 64 * p;
            _mm_prefetch(reinterpret_cast<const char*>(q) + kX16Ahead, _MM_HINT_T1);
            __m256i v[H], he[H];
            FT_UNROLL for (int h = 0; h < H; ++h) {
              v[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * (h0 + h)));
              he[h] = e ? _mm256_srli_epi16(hv[h], 2) : hv[h];
            }
            FT_UNROLL for (int k = 0; k < 4; ++k) {
              __m256i w[H];
              FT_UNROLL for (int h = 0; h < H; ++h) w[h] = word(k, v[h], he[h]);
              FT_UNROLL for (int t = 0; t < NT; ++t) {
                const __m256i xp =
                    _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + kQK * s + 8 * p + 2 * k));
                FT_UNROLL for (int h = 0; h < H; ++h) acc[h][t] = x16_mac(acc[h][t], w[h], xp);
              }
            }
          }
          FT_UNROLL for (int h = 0; h < H; ++h) {
            const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + 3072 + 16 * j + 8 * (h0 + h)));
            const __m256 dsc = _mm256_mul_ps(d[h], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)));
            FT_UNROLL for (int t = 0; t < NT; ++t) {
              const int64_t b = t * nb + 8 * s + j / 2;  // the activation block of 32 columns
              y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(dsc, _mm256_set1_ps(dx[b])), y[h][t]);
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

void FT_X16_NAME(rows_q16_q6kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<Q6kX16>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
