// AVX-512 kernel for the 4-bit nibble formats (MXFP4, NVFP4, INT4 with groups of 32, 64, 128k) over fp32 x, by
// table: one 64-byte load holds 128 columns (byte j: columns 2j (low nibble), 2j + 1). Read as 16 dwords,
// dword i holds columns 8i..8i+7 in its 8 nibbles, and `vpermps` looks up only the low 4 bits of each dword:
// so (dword >> 4j) indexes a 16-entry fp32 table directly, giving column 8i + j in lane i -- 7 shifts and 8
// table lookups per 128 weights, no masking and no int-to-float conversion. x is put in the same order once
// per call (per chunk of 128 columns, X_j[i] = x[8i + j]). Lane i's 8 columns lie in one scale block, so each
// chunk's partial sums are scaled per lane (D::scales, x86_avx512_nib.h) and added with one FMA; 4 tokens share
// each lookup.
// Included only by x86_avx512_{mxfp4,nvfp4,int4}.cpp.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf, kTokBlock
#include "cpu/arch/x86_avx512_nib.h"  // the formats' per-lane scales

namespace ft {
namespace avx512_lut4 {
namespace {  // internal linkage: each SIMD file its own copy, built with its flags

using avx512_nib::chunks;
inline int64_t padded_ld(int64_t cols) { return chunks(cols) * 128 + 16; }  // floats per x row (no 4 KiB aliasing)

// x rows of nt tokens in the table order; zeros past cols. xs (D::kZero): per chunk and lane, the sum of x
// over the lane's 8 columns.
template <bool kZero>
inline void prep(const float* X, int64_t ldx, int nt, int64_t cols, float* xp, int64_t ldp, float* xs, int64_t lds) {
  const __m512i base = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(8));
  const int64_t nch = chunks(cols);
  for (int t = 0; t < nt; ++t) {
    const float* x = X + t * ldx;
    float* d = xp + t * ldp;
    for (int64_t k = 0; k < nch; ++k) {
      const int64_t c = 128 * k;
      __m512 sum = _mm512_setzero_ps();
      if (c + 128 <= cols) {
        FT_UNROLL for (int j = 0; j < 8; ++j) {
          const __m512 v = _mm512_i32gather_ps(_mm512_add_epi32(base, _mm512_set1_epi32(j)), x + c, 4);
          _mm512_storeu_ps(d + c + 16 * j, v);
          sum = _mm512_add_ps(sum, v);
        }
      } else {
        for (int j = 0; j < 8; ++j)
          for (int i = 0; i < 16; ++i) d[c + 16 * j + i] = c + 8 * i + j < cols ? x[c + 8 * i + j] : 0.f;
        FT_UNROLL for (int j = 0; j < 8; ++j) sum = _mm512_add_ps(sum, _mm512_loadu_ps(d + c + 16 * j));
      }
      if (kZero) _mm512_storeu_ps(xs + t * lds + 16 * k, sum);
    }
  }
}

template <class D, int NR, int NT, int PF, bool kTail>
inline void chunk(const WeightMat& m, int64_t r, int64_t k, __m512 lut, const float* xp, int64_t ldp, const float* xs,
                  int64_t lds, __m512 (&acc)[NR][NT]) {
  const int64_t c = 128 * k;
  FT_UNROLL for (int i = 0; i < NR; ++i) {
    const uint8_t* qr = m.q + (r + i) * m.q_stride + 64 * k;
    if (PF) _mm_prefetch(reinterpret_cast<const char*>(qr) + PF, _MM_HINT_T0);
    __m512i v;
    if (kTail) {
      const int64_t nbytes = (m.cols - c) / 2;  // < 64
      v = _mm512_maskz_loadu_epi8((__mmask64(1) << nbytes) - 1, qr);
    } else {
      v = _mm512_loadu_si512(qr);
    }
    __m512 w[8];
    FT_UNROLL for (int j = 0; j < 8; ++j) w[j] = _mm512_permutexvar_ps(j ? _mm512_srli_epi32(v, 4 * j) : v, lut);
    const __m512 sv = D::scales(m, r + i, k);
    __m512 zv = _mm512_setzero_ps();
    if (D::kZero) zv = D::zeros(m, r + i, k);
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      const float* x = xp + t * ldp + c;
      __m512 p0 = _mm512_mul_ps(w[0], _mm512_loadu_ps(x)), p1 = _mm512_mul_ps(w[1], _mm512_loadu_ps(x + 16));
      FT_UNROLL for (int j = 2; j < 8; j += 2) {
        p0 = _mm512_fmadd_ps(w[j], _mm512_loadu_ps(x + 16 * j), p0);
        p1 = _mm512_fmadd_ps(w[j + 1], _mm512_loadu_ps(x + 16 * j + 16), p1);
      }
      __m512 p = _mm512_add_ps(p0, p1);
      if (D::kZero) p = _mm512_fnmadd_ps(zv, _mm512_loadu_ps(xs + t * lds + 16 * k), p);
      acc[i][t] = _mm512_fmadd_ps(p, sv, acc[i][t]);
    }
  }
}

template <class D, int NR, int NT, int PF>
inline void tile(const WeightMat& m, int64_t r, __m512 lut, const float* xp, int64_t ldp, const float* xs, int64_t lds,
                 float* Y, int64_t ldy) {
  __m512 acc[NR][NT];
  FT_UNROLL for (int i = 0; i < NR; ++i)
    FT_UNROLL for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  const int64_t full = m.cols / 128;
  if (PF) avx512_nib::prefetch_side<D>(m, r);
  for (int64_t k = 0; k < full; ++k) chunk<D, NR, NT, PF, false>(m, r, k, lut, xp, ldp, xs, lds, acc);
  if (m.cols % 128) chunk<D, NR, NT, PF, true>(m, r, full, lut, xp, ldp, xs, lds, acc);
  const float post = D::post(m);
  FT_UNROLL for (int i = 0; i < NR; ++i)
    FT_UNROLL for (int t = 0; t < NT; ++t) Y[t * ldy + i] = _mm512_reduce_add_ps(acc[i][t]) * post;
}

template <class D, int NT>
inline void block(const WeightMat& m, int64_t r0, int64_t r1, __m512 lut, const float* xp, int64_t ldp, const float* xs,
                  int64_t lds, float* Y, int64_t ldy) {
  constexpr int NR = 1, PF = NT == 1 ? avx512_nib::kAhead : 0;
  for (int64_t r = r0; r < r1; r += NR) tile<D, NR, NT, PF>(m, r, lut, xp, ldp, xs, lds, Y + (r - r0), ldy);
}

template <class D>
inline void rows(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                 int64_t ldy) {
  const int64_t ldp = padded_ld(m.cols), lds = chunks(m.cols) * 16;
  thread_local FloatBuf xbuf, sbuf;
  float* xp = xbuf.get(kTokBlock * ldp);
  float* xs = D::kZero ? sbuf.get(kTokBlock * lds) : nullptr;
  const __m512 lut = D::lut();
  for (int64_t t0 = 0; t0 < ntok; t0 += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, ntok - t0));
    prep<D::kZero>(X + t0 * ldx, ldx, nt, m.cols, xp, ldp, xs, lds);
    float* Yt = Y + t0 * ldy;
    switch (nt) {
      case 4: block<D, 4>(m, r0, r1, lut, xp, ldp, xs, lds, Yt, ldy); break;
      case 3: block<D, 3>(m, r0, r1, lut, xp, ldp, xs, lds, Yt, ldy); break;
      case 2: block<D, 2>(m, r0, r1, lut, xp, ldp, xs, lds, Yt, ldy); break;
      default: block<D, 1>(m, r0, r1, lut, xp, ldp, xs, lds, Yt, ldy); break;
    }
  }
}

}  // namespace
}  // namespace avx512_lut4
}  // namespace ft
