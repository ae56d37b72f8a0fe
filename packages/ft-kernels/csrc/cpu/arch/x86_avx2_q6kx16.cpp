// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for Q6_K_X16 (Q6_K with 16 rows interleaved: Q4_K_M files' down
// projections in every other layer, value projections and LM head, cpu/formats.h): rows in the lanes
// (x86_avx2_x16.h), for a bf16 engine on CPUs without a bf16 dot product; and int8 activations (opt-in, below).
// The 16-bit kernel is taken with AVX-VNNI only (dispatch.cpp): there it beats the row-wise 16-bit kernel
// (x86_avx2_q8kquant.cpp), whose per-row folds bound it; in AVX2 code the code assembly below costs what the folds do.
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

#include "cpu/arch/x86_avx2_x16.h"  // x16_rows_i16, x16_tiles, x16_prep_i8_halves, x16_mac, kX16Ahead

namespace ft {
namespace {

// Int8 x (opt-in, cpu/q8.h: Q8Act): the codes q as unsigned bytes (Q6kX16::bytes), x's 4 int8 columns a dword
// broadcast; with AVX-VNNI `vpdpbusd` adds a row's 4 products to its lane, in AVX2 `vpmaddubsw` pairs of a half-load's
// two vectors summed in int16 (|sum| <= 4 * 63 * 127 < 2^15) and one `vpmaddwd` with ones. Per sub-block of 16
// columns: y += d sc_i (dx dot - 32 sxh) (sxh: dx times x's sum over those 16 columns, Q8Act's sd halves), in two
// FMAs. Exact integer dots (|dot| <= 16 * 63 * 127 < 2^17).
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

  // int8 x: the 6-bit codes (0..63) of a half-load's low- and high-nibble columns as bytes (columns 8p..8p+3 and
  // 8p+4..8p+7 of each row's dword). A low nibble's high field lies at bits 4-5 of the same byte of he (k = 0, 2); a
  // high nibble's at bits 0-1 of the other byte of its 16-bit word (k = 1, 3): swapped and shifted up by 4.
  static void bytes(const __m256i& v, const __m256i& he, __m256i& lo, __m256i& hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i swap = _mm256_setr_epi8(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14,  //
                                          1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(he, m30));
    hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                         _mm256_and_si256(_mm256_slli_epi16(_mm256_shuffle_epi8(he, swap), 4), m30));
  }

  // acc[h][t] += the int32 dots of rows 8 (h0 + h)..+7 with token t over the 8 columns 8p.. of the tile (half-loads v,
  // high fields he); x of the super-block at xs + t * ldo. 16-bit x: (q - 32) x per nibble pair.
  template <int NT, int H>
  static void dot8(const __m256i (&v)[H], const __m256i (&he)[H], int64_t p, const int16_t* xs, int64_t ldo,
                   __m256i (&acc)[H][NT]) {
    FT_UNROLL for (int k = 0; k < 4; ++k) {
      __m256i w[H];
      FT_UNROLL for (int h = 0; h < H; ++h) w[h] = word(k, v[h], he[h]);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const __m256i xp = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xs + t * ldo + 8 * p + 2 * k));
        FT_UNROLL for (int h = 0; h < H; ++h) acc[h][t] = x16_mac(acc[h][t], w[h], xp);
      }
    }
  }
  // int8 x: q x (the offset 32 comes off with x's sums).
  template <int NT, int H>
  static void dot8(const __m256i (&v)[H], const __m256i (&he)[H], int64_t p, const int8_t* xs, int64_t ldo,
                   __m256i (&acc)[H][NT]) {
    __m256i lo[H], hi[H];
    FT_UNROLL for (int h = 0; h < H; ++h) bytes(v[h], he[h], lo[h], hi[h]);
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      const __m256i x0 = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xs + t * ldo + 8 * p));
      const __m256i x1 = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xs + t * ldo + 8 * p + 4));
      FT_UNROLL for (int h = 0; h < H; ++h) {
#if defined(__AVXVNNI__)
        acc[h][t] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc[h][t], lo[h], x0), hi[h], x1);
#else
        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], x0), _mm256_maddubs_epi16(hi[h], x1));
        acc[h][t] = _mm256_add_epi32(acc[h][t], _mm256_madd_epi16(s, _mm256_set1_epi16(1)));
#endif
      }
    }
  }

  // Rows r..r+15 of m against NT tokens, H halves (8 rows each) a pass: Y[t * ldy + i] = row r + i . token t. x:
  // 16-bit codes (E = int16_t, x16_prep_i16's order) or int8 (int8_t, x16_prep_i8_halves').
  template <int NT, int H, class E>
  static void group(const WeightMat& m, int64_t r, const E* xo, int64_t ldo, const float* dx, const float* sx,
                    float* Y, int64_t ldy) {
    constexpr bool k8 = sizeof(E) == 1;
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
            dot8<NT, H>(v, he, p, xo + kQK * s, ldo, acc);
          }
          FT_UNROLL for (int h = 0; h < H; ++h) {
            const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + 3072 + 16 * j + 8 * (h0 + h)));
            const __m256 dsc = _mm256_mul_ps(d[h], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)));
            FT_UNROLL for (int t = 0; t < NT; ++t) {
              const int64_t b = t * nb + 8 * s + j / 2;  // the activation block of 32 columns
              y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(dsc, _mm256_set1_ps(dx[b])), y[h][t]);
              if constexpr (k8) y[h][t] = _mm256_fnmadd_ps(dsc, _mm256_set1_ps(32.f * sx[t * 2 * nb + 16 * s + j]), y[h][t]);
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

void FT_X16_NAME(rows_q8_q6kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  if (r0 % 16 || r1 % 16) return rows_q8_scalar(m, r0, r1, x, Y, ldy);  // callers split rows in 16s
  x16_tiles<Q6kX16, int8_t, x16_prep_i8_halves>(m, r0, r1, x, Y, ldy);
}

void FT_X16_NAME(rows_q16_q6kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<Q6kX16>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
