// AVX-512 BF16 kernel for the 4-bit nibble formats (MXFP4, NVFP4, INT4 with groups of 32, 64, 128k) over bf16
// activations (cpu/bf16act.h): the weights become bf16 by table and meet x in `vdpbf16ps`. One 64-byte load
// holds 128 columns; read as 32 words, word p holds columns 4p..4p+3 in its 4 nibbles, and `vpermw` looks up
// only the low 5 bits of each word, so (word >> 4j) indexes a 32-entry bf16 table (the 16 code values twice)
// directly: column 4p + j in word p of vector j -- 3 shifts and 4 lookups per 128 weights, half the table
// kernel's (x86_avx512_lut4.h: 7 shifts, 8 `vpermps`), and 4 dot products instead of 8 FMAs. `vdpbf16ps` adds
// the products of words 2i and 2i + 1 into fp32 lane i, so over the 4 vectors lane i sums columns 8i..8i+7 --
// the lanes of x86_avx512_nib.h, whose per-lane scales (and zeros) apply unchanged. x is put in the matching
// order once per call (per chunk, X_j[p] = x[4p + j]). Every code value is exact in bf16 and every product of
// two bf16 exact in fp32, so the result differs from the fp32 kernel's on the same (bf16) x only by the fp32
// summation order.
//
// Measured on one Zen 4 core (one 2048-column row after another from DRAM, T = 1): 13-14 GB/s against
// 10-11 for the fp32 table kernel; both reach ~24 and ~12 GB/s on rows held in L2. On one Zen 5 core, with
// the group size a template parameter (no division or mask per chunk) and the prefetches of
// x86_avx512_nib.h: INT4 (groups of 32) 31 GB/s, MXFP4 25-31, from DRAM. On a Sapphire Rapids VM an
// earlier version of this kernel was slower than the fp32 one (`vdpbf16ps` issued once per ~2.6 cycles there),
// so dispatch.cpp takes it on AMD CPUs only. Included only by x86_avx512bf16_*.cpp.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf, u16_buf, kTokBlock
#include "cpu/arch/x86_avx512_nib.h"  // the formats' per-lane scales and code tables

namespace ft {
namespace avx512bf16_lut4 {
namespace {  // internal linkage: each SIMD file its own copy, built with its flags

using avx512_nib::chunks;
inline int64_t padded_ld(int64_t cols) { return chunks(cols) * 128 + 32; }  // bf16 per x row (no 4 KiB aliasing)

// The 16 fp32 code values of D::lut() as 32 bf16 words (twice over: vpermw reads 5 index bits). Exact.
inline __m512i bf16_table(__m512 lut) {
  const __m256i h = (__m256i)_mm512_cvtneps_pbh(lut);
  return _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
}

// The column order of one 64-byte load's words: col(p, j) in 0..127 is the column of the chunk whose weight
// is nibble j of word p. Nibble formats (word p holds columns 4p..4p+3): 4p + j. GGUF's Q4_K and Q6_K:
// x86_avx512bf16_kquant.cpp. idx[j] word p: that column mod 64, and bit p of half[j]: whether it lies in
// the chunk's second 64 columns.
struct WordOrder {
  __m512i idx[4];
  __mmask32 half[4];
};
template <class F>
inline WordOrder word_order(F col) {
  WordOrder o;
  FT_UNROLL for (int j = 0; j < 4; ++j) {
    alignas(64) uint16_t v[32];
    o.half[j] = 0;
    for (int p = 0; p < 32; ++p) {
      v[p] = static_cast<uint16_t>(col(p, j) & 63);
      if (col(p, j) >= 64) o.half[j] |= __mmask32(1) << p;
    }
    o.idx[j] = _mm512_load_si512(v);
  }
  return o;
}

// x rows of nt tokens (bf16) in the order o (word_order), zeros past cols. xs (kZero): per chunk and lane,
// the sum of x over the lane's 8 columns, in fp32 (vdpbf16ps against ones: exact products, fp32 sums).
template <bool kZero>
inline void prep(const uint16_t* X, int64_t ldx, int nt, int64_t cols, uint16_t* xp, int64_t ldp, float* xs,
                 int64_t lds, const WordOrder& o) {
  const int64_t nch = chunks(cols);
  const __m512i ones = _mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int t = 0; t < nt; ++t) {
    const uint16_t* x = X + t * ldx;
    uint16_t* d = xp + t * ldp;
    for (int64_t k = 0; k < nch; ++k) {
      const int64_t c = 128 * k, n = std::min<int64_t>(128, cols - c);
      __m512i in[4];
      FT_UNROLL for (int i = 0; i < 4; ++i) {
        const int64_t m = std::clamp<int64_t>(n - 32 * i, 0, 32);
        in[i] = _mm512_maskz_loadu_epi16(m == 32 ? ~__mmask32(0) : (__mmask32(1) << m) - 1, x + c + 32 * i);
      }
      __m512 sum = _mm512_setzero_ps();
      FT_UNROLL for (int j = 0; j < 4; ++j) {
        const __m512i lo = _mm512_permutex2var_epi16(in[0], o.idx[j], in[1]);  // columns < 64
        const __m512i hi = _mm512_permutex2var_epi16(in[2], o.idx[j], in[3]);
        const __m512i v = _mm512_mask_blend_epi16(o.half[j], lo, hi);
        _mm512_storeu_si512(d + c + 32 * j, v);
        if (kZero) sum = _mm512_dpbf16_ps(sum, (__m512bh)v, (__m512bh)ones);
      }
      if (kZero) _mm512_storeu_ps(xs + t * lds + 16 * k, sum);
    }
  }
}

template <class D, int NT, int PF, bool kTail>
inline void chunk(const WeightMat& m, int64_t r, int64_t k, __m512i lut, const uint16_t* xp, int64_t ldp,
                  const float* xs, int64_t lds, __m512 (&acc)[NT]) {
  const int64_t c = 128 * k;
  const uint8_t* qr = m.q + r * m.q_stride + 64 * k;
  if (PF) _mm_prefetch(reinterpret_cast<const char*>(qr) + PF, _MM_HINT_T0);
  __m512i v;
  if (kTail) {
    const int64_t nbytes = (m.cols - c) / 2;  // < 64; the rest of the chunk reads code 0 against x = 0
    v = _mm512_maskz_loadu_epi8((__mmask64(1) << nbytes) - 1, qr);
  } else {
    v = _mm512_loadu_si512(qr);
  }
  __m512bh w[4];
  FT_UNROLL for (int j = 0; j < 4; ++j) w[j] = (__m512bh)_mm512_permutexvar_epi16(j ? _mm512_srli_epi16(v, 4 * j) : v, lut);
  const __m512 sv = D::scales(m, r, k);
  __m512 zv = _mm512_setzero_ps();
  if (D::kZero) zv = D::zeros(m, r, k);
  FT_UNROLL for (int t = 0; t < NT; ++t) {
    const uint16_t* x = xp + t * ldp + c;
    __m512 p0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), w[0], (__m512bh)_mm512_loadu_si512(x));
    __m512 p1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), w[1], (__m512bh)_mm512_loadu_si512(x + 32));
    p0 = _mm512_dpbf16_ps(p0, w[2], (__m512bh)_mm512_loadu_si512(x + 64));
    p1 = _mm512_dpbf16_ps(p1, w[3], (__m512bh)_mm512_loadu_si512(x + 96));
    __m512 p = _mm512_add_ps(p0, p1);
    if (D::kZero) p = _mm512_fnmadd_ps(zv, _mm512_loadu_ps(xs + t * lds + 16 * k), p);
    acc[t] = _mm512_fmadd_ps(p, sv, acc[t]);
  }
}

template <class D, int NT, int PF>
inline void row(const WeightMat& m, int64_t r, __m512i lut, const uint16_t* xp, int64_t ldp, const float* xs,
                int64_t lds, float* Y, int64_t ldy) {
  __m512 acc[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const int64_t full = m.cols / 128;
  if (PF) avx512_nib::prefetch_side<D>(m, r);
  for (int64_t k = 0; k < full; ++k) chunk<D, NT, PF, false>(m, r, k, lut, xp, ldp, xs, lds, acc);
  if (m.cols % 128) chunk<D, NT, PF, true>(m, r, full, lut, xp, ldp, xs, lds, acc);
  const float post = D::post(m);
  FT_UNROLL for (int t = 0; t < NT; ++t) Y[t * ldy] = _mm512_reduce_add_ps(acc[t]) * post;
}

template <class D, int NT>
inline void block(const WeightMat& m, int64_t r0, int64_t r1, __m512i lut, const uint16_t* xp, int64_t ldp,
                  const float* xs, int64_t lds, float* Y, int64_t ldy) {
  constexpr int PF = NT == 1 ? avx512_nib::kAhead : 0;
  for (int64_t r = r0; r < r1; ++r) row<D, NT, PF>(m, r, lut, xp, ldp, xs, lds, Y + (r - r0), ldy);
}

// Decoder of the prefill kernel (x86_avx512bf16_tokgemm.h) for a format D of x86_avx512_nib.h with a scale per
// 32 columns and no zero point (MXFP4, INT4 symmetric): blocks of 64 columns (byte i: columns 2i, 2i + 1).
// Byte i widened to dword i, or'ed with itself << 12, holds the low nibble in word 0's index bits and the high
// one in word 1's: one `vpermw` gives the pair of bf16 codes in column order.
template <class D>
struct NibT {
  static constexpr int kCols = 64, kSub = 32;
  static constexpr bool kMins = false;
  static constexpr int kMin16 = 12, kMin8 = 0;  // the row-wise kernel is as fast up to 11 tokens
  static void decode(const WeightMat& m, int64_t row, int64_t b, uint16_t* codes, float* sm) {
    const __m512i lut = bf16_table(D::lut());
    const uint8_t* q = m.q + row * m.q_stride + 32 * b;
    FT_UNROLL for (int h = 0; h < 2; ++h) {
      const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h)));
      _mm512_storeu_si512(codes + 32 * h, _mm512_permutexvar_epi16(_mm512_or_si512(d, _mm512_slli_epi32(d, 12)), lut));
      sm[h] = D::sub_scale(m, row, 2 * b + h);
    }
  }
};

// Y[t, r - r0] = sum_c W[r, c] * X[t, c] (RowsBf16Fn) for a format D of x86_avx512_nib.h.
template <class D>
inline void rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx, float* Y,
                 int64_t ldy) {
  const int64_t ldp = padded_ld(m.cols), lds = chunks(m.cols) * 16;
  thread_local FloatBuf xbuf, sbuf;
  uint16_t* xp = u16_buf(xbuf, kTokBlock * ldp);
  float* xs = D::kZero ? sbuf.get(kTokBlock * lds) : nullptr;
  const __m512i lut = bf16_table(D::lut());
  const WordOrder order = word_order([](int p, int j) { return 4 * p + j; });
  for (int64_t t0 = 0; t0 < ntok; t0 += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, ntok - t0));
    prep<D::kZero>(X + t0 * ldx, ldx, nt, m.cols, xp, ldp, xs, lds, order);
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
}  // namespace avx512bf16_lut4
}  // namespace ft
