// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for Q4_K_X16 and Q5_K_X16 (Q4_K, Q5_K with 16 rows interleaved,
// cpu/formats.h): rows in the lanes (x86_avx2_x16.h), for a bf16 engine on CPUs without a bf16 dot product; and int8
// activations (opt-in).
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
//
// Q5_K_X16 is Q4_K_X16 with a plane of fifth bits, one 64-byte load a sub-block (32 bytes a half): for nibble k of
// load u the bit sits 4 above the nibble once the plane's 16-bit word is shifted down by u (k < 3), or at bit u of
// the dword's other word (k = 3). Q5Words joins them into 16-bit codes (0..31; 16 more masks, shifts and ors per
// load and half than Q4_K's, shared by the tile's tokens), Q5Bytes into bytes for int8 x: a low nibble's fifth bit
// sits at bit 4 + u of its own byte, a high nibble's at bit u of the next byte of its dword (a byte rotation, once
// a sub-block). The scales, mins and FMAs are Q4_K's.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

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

// A Q5_K_X16 sub-block's plane of fifth bits for halves h0..h0+H-1: P[h], and A[h], P[h] through `vpshufb` by ctl
// (Q5Words: its words swapped within each dword; Q5Bytes: its bytes rotated down by one within each dword).
struct Q5Plane {
  __m256i P[2], A[2];
  Q5Plane(const uint8_t* plane, int h0, int H, __m128i ctl) {
    const __m256i c = _mm256_broadcastsi128_si256(ctl);
    for (int h = h0; h < h0 + H; ++h) {
      P[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(plane + 32 * h));
      A[h] = _mm256_shuffle_epi8(P[h], c);
    }
  }
};

// Q5_K_X16's codes as 16-bit words for x16_dot_block (A: k = 3's bit). pl (x16_dot_block's per-half state): P[h] >>
// u, set at k = 0.
struct Q5Words : Q5Plane {
  static constexpr int kOrder[4] = {0, 1, 2, 3};
  Q5Words(const uint8_t* plane, int h0, int H)
      : Q5Plane(plane, h0, H, _mm_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13)) {}
  __m256i word(int k, const __m256i& v, __m256i& pl, int h, int u) const {
    if (k == 3)
      return _mm256_or_si256(_mm256_srli_epi16(v, 12),
                             _mm256_and_si256(_mm256_slli_epi16(A[h], 4 - u), _mm256_set1_epi16(0x0010)));
    if (k == 0) pl = u ? _mm256_srli_epi16(P[h], u) : P[h];
    const __m256i c = _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi16(0x000f << 4 * k)),
                                      _mm256_and_si256(pl, _mm256_set1_epi16(0x0010 << 4 * k)));
    return k ? _mm256_srli_epi16(c, 4 * k) : c;
  }
};

// Q5_K_X16's codes as bytes for int8 x (columns 8u..8u+3 and 8u+4..8u+7 of each row's dword; A: a high nibble's
// bit).
struct Q5Bytes : Q5Plane {
  static constexpr int kMaxCode = 31;
  Q5Bytes(const uint8_t* plane, int h0, int H)
      : Q5Plane(plane, h0, H, _mm_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12)) {}
  void bytes(const __m256i& v, __m256i& lo, __m256i& hi, int h, int u) const {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m5 = _mm256_set1_epi8(0x10);
    lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16(P[h], u), m5));
    hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                         _mm256_and_si256(_mm256_slli_epi16(A[h], 4 - u), m5));
  }
};

// Q4_K_X16 (Q5 false) or Q5_K_X16 (Q5 true).
template <bool Q5>
struct KX16 {
  static constexpr int kTokens = kX16Tokens;  // tokens a tile at most
  static constexpr int64_t kTileBytes = Q5 ? kX16Q5Tile : kX16Tile, kScales = Q5 ? 2560 : 2048, kD = kScales + 192;
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
        const uint8_t* tile = g + s * kTileBytes;
        // sub-block j (block 8s + j of x): its exact dots, scaled into y by the rows' scale and min bytes fsc, fmn
        const auto sub_block = [&](int j, const uint8_t* fsc, const uint8_t* fmn) __attribute__((always_inline)) {
          __m256i acc[H][NT];
          if constexpr (Q5) {
            const uint8_t* plane = tile + 2048 + 64 * j;
            _mm_prefetch(reinterpret_cast<const char*>(plane) + kX16Ahead, _MM_HINT_T1);
            using Dec = std::conditional_t<sizeof(E) == 1, Q5Bytes, Q5Words>;
            x16_dot_block<NT, H>(tile + 256 * j, h0, xo + kQK * s + 32 * j, ldo, acc, Dec(plane, h0, H));
          } else {
            x16_dot_block<NT, H>(tile + 256 * j, h0, xo + kQK * s + 32 * j, ldo, acc);
          }
          FT_UNROLL for (int h = 0; h < H; ++h) {
            const __m256 dsc = _mm256_mul_ps(half_f16(tile + kD, h0 + h), half_u8(fsc, h0 + h));
            const __m256 dmn = _mm256_mul_ps(half_f16(tile + kD + 32, h0 + h), half_u8(fmn, h0 + h));
            FT_UNROLL for (int t = 0; t < NT; ++t) {
              const int64_t b = t * nb + 8 * s + j;
              y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(dsc, _mm256_set1_ps(dx[b])), y[h][t]);
              y[h][t] = _mm256_fnmadd_ps(dmn, _mm256_set1_ps(sx[b]), y[h][t]);
            }
          }
        };
        // the 8 sub-blocks' scale and min bytes, in memory (out of the 16 registers); Q4_K packs those of j and
        // j + 4 together
        alignas(16) uint8_t f[8][2][16];
        for (int jj = 0; jj < 4; ++jj) {
          // the tile's 4 lines past its codes (scales, d, dmin), which the code loads' prefetches skip
          _mm_prefetch(reinterpret_cast<const char*>(tile + kScales + 64 * jj) + kX16Ahead, _MM_HINT_T1);
          __m128i f0, f1, f2, f3;
          x16_fields6(tile + kScales, jj, f0, f1, f2, f3);
          _mm_store_si128(reinterpret_cast<__m128i*>(f[jj][0]), f0);
          _mm_store_si128(reinterpret_cast<__m128i*>(f[jj][1]), f1);
          _mm_store_si128(reinterpret_cast<__m128i*>(f[jj + 4][0]), f2);
          _mm_store_si128(reinterpret_cast<__m128i*>(f[jj + 4][1]), f3);
        }
        if constexpr (NT == 1 && !Q5) {
          // One token (a stream from DRAM): the 8 sub-blocks in memory order, not 0, 4, 1, 5, ... (1 KiB jumps back
          // and forth in the 2.3 KiB tile), as the zmm kernel (x86_avx512vnni_x16i16.cpp).
          for (int j = 0; j < 8; ++j) sub_block(j, f[j][0], f[j][1]);
        } else {
          for (int jj = 0; jj < 4; ++jj)  // a loop: unrolled, the group's code outgrew the caches
            FT_UNROLL for (int hb = 0; hb < 2; ++hb) sub_block(jj + 4 * hb, f[jj + 4 * hb][0], f[jj + 4 * hb][1]);
        }
      }
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t)
          _mm256_storeu_ps(Y + t * ldy + 8 * (h0 + h), y[h][t]);
    }
  }
};

}  // namespace

void FT_X16_NAME(rows_q16_q4kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<KX16<false>>(m, r0, r1, x, Y, ldy);
}
void FT_X16_NAME(rows_q8_q4kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  x16_rows_i8<KX16<false>>(m, r0, r1, x, Y, ldy);
}
void FT_X16_NAME(rows_q16_q5kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<KX16<true>>(m, r0, r1, x, Y, ldy);
}
void FT_X16_NAME(rows_q8_q5kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  x16_rows_i8<KX16<true>>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
