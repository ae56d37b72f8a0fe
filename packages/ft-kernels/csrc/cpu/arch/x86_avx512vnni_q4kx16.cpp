// AVX-512 VNNI, int8 activations (cpu/q8.h) for Q4_K_X16 (Q4_K with 16 rows interleaved, cpu/formats.h): rows
// in the lanes.
//
// The row-wise K-quant kernels (x86_avx512vnni_q8kquant.cpp) put columns in the lanes, so every lane mixes two
// sub-blocks and pays a conversion, a scale product and an FMA per 4 products, plus an x load per weight vector.
// Here lane i is row i of the group: one 64-byte load is 8 columns of 16 rows, its low and high nibbles two
// vectors of 4 columns each, and `vpdpbusd` takes x's 4 int8 columns as a dword broadcast. A sub-block of 32
// columns is one activation block: 8 `vpdpbusd` leave in lane i the integer dot of row i over it, scaled once
// (d sc_i times the block's d_x, one conversion and FMA) with the min -(dmin m_i) * d_x sum(q) in one more FMA.
// The 16 rows' 6-bit scales are unpacked from their byte planes once per super-block for all the tile's tokens.
//
// Per 512 weights and token: 8 `vpdpbusd`, 4 scale instructions, after a 12-instruction decode shared by up to
// 4 tokens (the row-wise kernel: ~16 + 12). Exact integer dots; the fp32 scaling differs from the scalar twin
// (scalar_q8.cpp) only in rounding order.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf, kTokBlock
#include "cpu/arch/x86_avx512_q4kx16.h"  // x16_scale_min, x16_d, x16_dmin
#include "cpu/dispatch.h"             // rows_q8_scalar
#include "cpu/q8.h"

namespace ft {

namespace {

constexpr int kAhead = 4096;  // software prefetch distance on the (single, sequential) tile stream

// x of nt tokens in natural column order (Q8Act keeps each block's even columns, then its odd ones), and per
// token and block b: d_x[b] and d_x * sum(q over b).
inline void prep(const Q8Act& a, int64_t t0, int nt, int64_t cols, int8_t* xn, float* dx, float* sx) {
  const int64_t nb = cols / 32;
  for (int t = 0; t < nt; ++t) {
    const int8_t* q = a.q + (t0 + t) * a.ldq;
    const float* d = a.d + (t0 + t) * a.ldb;
    const float* sd = a.sd + (t0 + t) * 2 * a.ldb;
    for (int64_t b = 0; b < nb; ++b) {
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b));
      const __m128i o = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b + 16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(xn + t * cols + 32 * b), _mm_unpacklo_epi8(e, o));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(xn + t * cols + 32 * b + 16), _mm_unpackhi_epi8(e, o));
      dx[t * nb + b] = d[b];
      sx[t * nb + b] = sd[2 * b] + sd[2 * b + 1];
    }
  }
}

template <int NT>
inline void group(const uint8_t* g, int64_t nsb, const int8_t* xn, int64_t cols, const float* dx, const float* sx,
                  float* Y, int64_t ldy) {
  const int64_t nb = cols / 32;
  const __m512i lo4 = _mm512_set1_epi8(0x0f);
  __m512 y[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* tile = g + s * kX16Tile;
    const __m512 d = x16_d(tile), dmin = x16_dmin(tile);
    __m512 sc[8], mn[8];
    FT_UNROLL for (int j = 0; j < 4; ++j) x16_scale_min(tile + 2048, j, sc[j], mn[j], sc[j + 4], mn[j + 4]);
    FT_UNROLL for (int j = 0; j < 8; ++j) {
      __m512i dot[NT];
      FT_UNROLL for (int t = 0; t < NT; ++t) dot[t] = _mm512_setzero_si512();
      FT_UNROLL for (int p = 4 * j; p < 4 * j + 4; ++p) {
        const uint8_t* c = tile + 64 * p;
        _mm_prefetch(reinterpret_cast<const char*>(c) + kAhead, _MM_HINT_T0);
        const __m512i v = _mm512_loadu_si512(c);
        const __m512i u0 = _mm512_and_si512(v, lo4), u1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
        FT_UNROLL for (int t = 0; t < NT; ++t) {
          int32_t x0, x1;
          std::memcpy(&x0, xn + t * cols + 256 * s + 8 * p, 4);
          std::memcpy(&x1, xn + t * cols + 256 * s + 8 * p + 4, 4);
          dot[t] = _mm512_dpbusd_epi32(dot[t], u0, _mm512_set1_epi32(x0));
          dot[t] = _mm512_dpbusd_epi32(dot[t], u1, _mm512_set1_epi32(x1));
        }
      }
      const __m512 dsc = _mm512_mul_ps(d, sc[j]), dmn = _mm512_mul_ps(dmin, mn[j]);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const int64_t b = t * nb + 8 * s + j;
        y[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[t]), _mm512_mul_ps(dsc, _mm512_set1_ps(dx[b])), y[t]);
        y[t] = _mm512_fnmadd_ps(dmn, _mm512_set1_ps(sx[b]), y[t]);
      }
    }
  }
  FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
}

}  // namespace

void rows_q8_q4kx16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  if (r0 % 16 || r1 % 16) return rows_q8_scalar(m, r0, r1, x, Y, ldy);  // callers split rows in 16s
  const int64_t cols = m.cols, nsb = cols / kQK, nb = cols / 32;
  thread_local FloatBuf bx, bd, bs;
  int8_t* xn = reinterpret_cast<int8_t*>(bx.get(kTokBlock * cols / 4 + 16));
  float* dx = bd.get(kTokBlock * nb);
  float* sx = bs.get(kTokBlock * nb);
  for (int64_t t0 = 0; t0 < x.ntok; t0 += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, x.ntok - t0));
    prep(x, t0, nt, cols, xn, dx, sx);
    for (int64_t r = r0; r < r1; r += 16) {
      const uint8_t* g = x16_tile(Fmt::Q4_K_X16, m.q, cols, r, 0);
      float* Yr = Y + t0 * ldy + (r - r0);
      switch (nt) {
        case 4: group<4>(g, nsb, xn, cols, dx, sx, Yr, ldy); break;
        case 3: group<3>(g, nsb, xn, cols, dx, sx, Yr, ldy); break;
        case 2: group<2>(g, nsb, xn, cols, dx, sx, Yr, ldy); break;
        default: group<1>(g, nsb, xn, cols, dx, sx, Yr, ldy); break;
      }
    }
  }
}

}  // namespace ft
