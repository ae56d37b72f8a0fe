// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for Q4_K_X16 (Q4_K with 16 rows interleaved, cpu/formats.h): rows in
// the lanes, for a bf16 engine on CPUs without a bf16 dot product (Zen 2/3, Intel desktops; AVX-512 without BF16).
//
// The row-wise 16-bit kernel (x86_avx2_q8kquant.cpp) puts a row's columns in the lanes: per sub-block it folds
// partial dot products with `vphaddd`, converts them, and unpacks that row's 6-bit scale and min (a quarter of its
// instructions). Here lane i of a ymm is row i of one half (8 rows) of the tile's 16. A 64-byte load is 8 columns
// of the 16 rows, its first 32 bytes rows 0..7 and its last rows 8..15; dword i of a half is row i's 8 codes (word 0:
// columns 8p + {0, 4, 1, 5}, word 1: 8p + {2, 6, 3, 7}, nibble k each). (dword >> 4k) & 0x000f000f, by a 16-bit
// shift and a mask, is the pair of codes of nibble k, and `vpmaddwd` with x's matching pair of 16-bit codes (one
// dword broadcast) adds both products to lane i in int32. A sub-block's 16 such products sum exactly in int32 (|sum|
// < 16 * 2 * 15 * 2^15 < 2^24, so its conversion to fp32 is exact as well); then one FMA by d sc_i dx and one by
// -dmin m_i sx (dx: the activation block's power-of-two scale, sx: dx times its sum of codes, Q16Act's d and sd;
// d sc_i and dmin m_i are exact in fp32). The 16 rows' scales come from the tile's byte planes once per two
// sub-blocks (x16_fields6), shared by the tile's tokens.
//
// Per 256 weights (8 rows, one sub-block) and token: 16 `vpmaddwd` and 16 `vpaddd`, after 4 loads, 12 shifts and
// masks and 16 dword broadcasts (shared by the two halves up to 2 tokens), 2 FMAs. Up to 2 tokens a tile both halves
// run in one pass; 3 or 4 tokens a tile take a pass per half (the second reads the group's tiles from cache), so
// that the accumulators fit the 16 ymm registers.
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/rows_common.h"     // FT_UNROLL, FloatBuf
#include "cpu/arch/x86_kq_fields.h"   // x16_fields6
#include "cpu/dispatch.h"             // rows_scalar
#include "cpu/q8.h"

namespace ft {
namespace {

constexpr int kTokens = 4;      // tokens a tile at most (then 3, 2, 1)
constexpr int kAhead = 8192;    // software prefetch distance on the (single, sequential) tile stream

// Tokens [0, nt) of x in the tiles' column-pair order: xo[t * ldo + 8p + 2k + {0, 1}] = codes of columns 8p + {0, 4,
// 1, 5}[k] and 8p + {2, 6, 3, 7}[k]; dx[t * nb + b] = block b's d, sx[t * nb + b] = its sd over both halves. In a
// Q16Act block (16 even columns, then 16 odd ones) the 8 columns of load p = 4u + (block) are qword u of the even
// half followed by qword u of the odd half.
inline void prep(const Q16Act& x, int nt, int64_t cols, int16_t* xo, int64_t ldo, float* dx, float* sx) {
  const int64_t nb = cols / 32;
  for (int t = 0; t < nt; ++t) {
    const int16_t* q = x.q + t * x.ldq;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b));
      const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b + 16));
      const __m256i lo = _mm256_unpacklo_epi64(e, o), hi = _mm256_unpackhi_epi64(e, o);  // [e0 o0 | e2 o2], [e1 o1 | e3 o3]
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xo + t * ldo + 32 * b), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xo + t * ldo + 32 * b + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
      dx[t * nb + b] = x.d[t * x.ldb + b];
      sx[t * nb + b] = x.sd[t * 2 * x.ldb + 2 * b] + x.sd[t * 2 * x.ldb + 2 * b + 1];  // exact: |sum of codes| < 2^20
    }
  }
}

// Rows 8h..8h+7 of 16 rows' bytes (a field a row), or f16 values, as fp32.
inline __m256 half_u8(const uint8_t* b, int h) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * h))));
}
inline __m256 half_f16(const uint8_t* p, int h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
}

// Rows r..r+15 of m against NT tokens, H halves (8 rows each) a pass: Y[t * ldy + i] = row r + i . token t.
template <int NT, int H>
void group(const WeightMat& m, int64_t r, const int16_t* xo, int64_t ldo, const float* dx, const float* sx, float* Y,
           int64_t ldy) {
  const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
  const int64_t nsb = m.cols / kQK, nb = m.cols / 32;
  const __m256i nib = _mm256_set1_epi16(0x000f);
  for (int h0 = 0; h0 < 2; h0 += H) {
    __m256 y[H][NT];
    FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) y[h][t] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* tile = g + s * kX16Tile;
      for (int jj = 0; jj < 4; ++jj) {  // a loop, as is u below: unrolled, the group's code outgrew the caches
        // the tile's 4 lines past its codes (scales, d, dmin), which the code loads' prefetches skip
        _mm_prefetch(reinterpret_cast<const char*>(tile + 2048 + 64 * jj) + kAhead, _MM_HINT_T1);
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
          FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) acc[h][t] = _mm256_setzero_si256();
          // a loop: unrolled, GCC hoisted the 4 loads and spilled products (one Zen 4 core at one token: 31 -> 35 GMAC/s)
#pragma GCC unroll 1
          for (int u = 0; u < 4; ++u) {
            const int p = 4 * j + u;  // columns 8p..8p+7 of the super-block
            const uint8_t* q = tile + 64 * p;
            _mm_prefetch(reinterpret_cast<const char*>(q) + kAhead, _MM_HINT_T1);
            __m256i v[H];
            FT_UNROLL for (int h = 0; h < H; ++h) v[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * (h0 + h)));
            FT_UNROLL for (int k = 0; k < 4; ++k) {
              __m256i w[H];
              FT_UNROLL for (int h = 0; h < H; ++h) w[h] = k == 3 ? _mm256_srli_epi16(v[h], 12)
                                                             : _mm256_and_si256(k ? _mm256_srli_epi16(v[h], 4 * k) : v[h], nib);
              FT_UNROLL for (int t = 0; t < NT; ++t) {
                const __m256i xp = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + kQK * s + 8 * p + 2 * k));
                FT_UNROLL for (int h = 0; h < H; ++h) acc[h][t] = _mm256_add_epi32(acc[h][t], _mm256_madd_epi16(w[h], xp));
              }
            }
          }
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

}  // namespace

void rows_q16_q4kx16_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  const int64_t cols = m.cols, nb = cols / 32, ldo = cols + 32;  // + 32: no 4 KiB aliasing between tokens
  thread_local FloatBuf bx, bs;
  if (r0 % 16 || r1 % 16) {  // callers split rows in 16s (linear.cpp, moe_ffn.cpp): x as fp32, the scalar twin
    float* xf = bs.get(x.ntok * cols);
    for (int64_t t = 0; t < x.ntok; ++t)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t b = c / 32, i = c % 32, at = 32 * b + (i % 2 ? 16 : 0) + i / 2;
        xf[t * cols + c] = static_cast<float>(x.q[t * x.ldq + at]) * x.d[t * x.ldb + b];
      }
    return rows_scalar(m, r0, r1, xf, x.ntok, cols, Y, ldy);
  }
  int16_t* xo = reinterpret_cast<int16_t*>(bx.get((kTokens * ldo + 1) / 2));
  float* dx = bs.get(2 * kTokens * nb);
  float* sx = dx + kTokens * nb;
  for (int64_t t0 = 0; t0 < x.ntok;) {
    const int nt = static_cast<int>(x.ntok - t0 >= kTokens ? kTokens : x.ntok - t0);
    prep(x.rows(t0, nt), nt, cols, xo, ldo, dx, sx);
    for (int64_t r = r0; r < r1; r += 16) {
      float* Yr = Y + t0 * ldy + (r - r0);
      switch (nt) {
        case 4: group<4, 1>(m, r, xo, ldo, dx, sx, Yr, ldy); break;
        case 3: group<3, 1>(m, r, xo, ldo, dx, sx, Yr, ldy); break;
        case 2: group<2, 2>(m, r, xo, ldo, dx, sx, Yr, ldy); break;
        default: group<1, 2>(m, r, xo, ldo, dx, sx, Yr, ldy); break;
      }
    }
    t0 += nt;
  }
}

}  // namespace ft
