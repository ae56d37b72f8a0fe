// AVX-512 BF16 prefill kernel for block formats whose codes are exact in bf16 and whose scales (and mins)
// apply per sub-block of a row: the GGUF K-quants, MXFP4, INT4 (symmetric). Tokens in the lanes, so a scale costs one FMA per 16 dot
// products (the row-wise kernels apply one per 2: a lane there sums columns of two sub-blocks).
//
// x of up to 16 tokens is transposed once per call into XT: XT[k] holds, in lane t, the dword of token t's
// columns 2k and 2k + 1 (two bf16). Per super-block, R rows are decoded into bf16 codes in column order
// (exact: small integers), and for each sub-block s and row i
//     p_i = sum over the sub-block's column pairs k of vdpbf16ps(broadcast(codes_i[2k, 2k + 1]), XT[k])
//     acc_i += scale_i[s] * p_i  (+ (-min_i[s]) * XS[s], XS[s] lane t = token t's sum over the sub-block)
// so lane t of acc_i is row i . token t. Every code and every product is exact in fp32; the result differs
// from the row-wise kernel's on the same x in fp32 rounding order only. One XT load serves R rows; each
// weight pair is one broadcast load. Worth it from 7-12 tokens a call (prefill: tokens per expert; ``rows``).
//
// Decoder D: kCols (columns of a block), kSub (columns per scale), kMins; kMin16, kMin8 (``rows``);
//            decode(const WeightMat& m, int64_t row, int64_t b, uint16_t* codes /* kCols bf16 */, float* sm):
//            block b of the row, sm[s] the scale of its sub-block s and (kMins) sm[kCols / kSub + s] the
//            negated min; kCols / kSub * (1 + kMins) <= 16. Matrices whose columns are not whole blocks are left
//            to the row-wise kernels (``rows`` returns 0).
// Included only by x86_avx512bf16_*.cpp.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf

namespace ft {
namespace avx512bf16_tokgemm {
namespace {

constexpr int kLanes = 16;  // tokens per tile

// r[i] (16 dwords) <- column i of the 16 x 16 dword matrix whose rows are r[0..15].
inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16], u[16];
  FT_UNROLL for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  FT_UNROLL for (int g = 0; g < 16; g += 4) {  // u[g + j], 128-bit lane L: rows g..g+3 of column 4L + j
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  FT_UNROLL for (int j = 0; j < 4; ++j) {
    const __m512i a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), b = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i c = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee), d = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    r[j] = _mm512_shuffle_i32x4(a, b, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(a, b, 0xdd);
    r[8 + j] = _mm512_shuffle_i32x4(c, d, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(c, d, 0xdd);
  }
}

// XT[k * 16 + t] = dword k of token t's row (columns 2k, 2k + 1) for t < nt, 0 for the other lanes;
// cols % 32 == 0. XS (sub-blocks of sub columns, if given): XS[g * 16 + t] = sum of token t's columns of
// sub-block g in fp32 (vdpbf16ps against ones: exact products).
inline void pack_x(const uint16_t* X, int64_t ldx, int nt, int64_t cols, uint32_t* XT, float* XS, int sub) {
  for (int64_t c = 0; c < cols; c += 32) {
    __m512i r[16];
    FT_UNROLL for (int t = 0; t < 16; ++t) r[t] = t < nt ? _mm512_loadu_si512(X + t * ldx + c) : _mm512_setzero_si512();
    transpose16(r);
    FT_UNROLL for (int k = 0; k < 16; ++k) _mm512_storeu_si512(XT + (c / 2 + k) * kLanes, r[k]);
  }
  if (!XS) return;
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int64_t g = 0; g < cols / sub; ++g) {
    __m512 s = _mm512_setzero_ps();
    for (int k = 0; k < sub / 2; ++k)
      s = _mm512_dpbf16_ps(s, ones, (__m512bh)_mm512_loadu_si512(XT + (g * sub / 2 + k) * kLanes));
    _mm512_storeu_ps(XS + g * kLanes, s);
  }
}

// Vector traits: 16 token lanes (zmm) or 8 (ymm, the first 8 lanes of the packed rows: as fast a product
// per cycle as zmm on Zen 4, whose 512-bit units are two 256-bit halves).
template <int L>
struct Lanes;
template <>
struct Lanes<16> {
  using V = __m512;
  static V zero() { return _mm512_setzero_ps(); }
  using B = __m512bh;
  static B xload(const uint32_t* x) { return (B)_mm512_loadu_si512(x); }
  static B wb(int32_t w) { return (B)_mm512_set1_epi32(w); }  // one broadcast load
  static V dp(V acc, B x, B w) { return _mm512_dpbf16_ps(acc, x, w); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V bcast(float v) { return _mm512_set1_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
};
template <>
struct Lanes<8> {
  using V = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  using B = __m256bh;
  static B xload(const uint32_t* x) { return (B)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)); }
  static B wb(int32_t w) { return (B)_mm256_set1_epi32(w); }
  static V dp(V acc, B x, B w) { return _mm256_dpbf16_ps(acc, x, w); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V bcast(float v) { return _mm256_set1_ps(v); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
};

// Rows r .. r + R - 1 against NT packed tiles (the first L lanes of each; tile j's XT at XT + j * xts, XS at
// XS + j * xss; every tile but the last full, the last with nt tokens): Y[(16 j + t) * ldy + i] = row r + i .
// token 16 j + t. The tiles share each block's decode and each weight broadcast.
template <class D, int L, int R, int NT>
inline void tile(const WeightMat& m, int64_t r, const uint32_t* XT, int64_t xts, const float* XS, int64_t xss, int nt,
                 float* Y, int64_t ldy) {
  using S = Lanes<L>;
  using V = typename S::V;
  constexpr int nsub = D::kCols / D::kSub, kp = D::kSub / 2;
  alignas(64) uint16_t codes[R][D::kCols];
  alignas(64) float sm[R][16];
  V acc[NT][R];
  FT_UNROLL for (int j = 0; j < NT; ++j) FT_UNROLL for (int i = 0; i < R; ++i) acc[j][i] = S::zero();
  const int64_t nb = m.cols / D::kCols;
  for (int64_t b = 0; b < nb; ++b) {
    FT_UNROLL for (int i = 0; i < R; ++i) D::decode(m, r + i, b, codes[i], sm[i]);
    const uint32_t* xb = XT + b * (D::kCols / 2) * kLanes;
    for (int s = 0; s < nsub; ++s) {
      V p[NT][R];
      FT_UNROLL for (int j = 0; j < NT; ++j) FT_UNROLL for (int i = 0; i < R; ++i) p[j][i] = S::zero();
      FT_UNROLL for (int k = 0; k < kp; ++k) {
        typename S::B xk[NT];
        FT_UNROLL for (int j = 0; j < NT; ++j) xk[j] = S::xload(xb + j * xts + (s * kp + k) * kLanes);
        FT_UNROLL for (int i = 0; i < R; ++i) {
          int32_t w;
          std::memcpy(&w, codes[i] + s * D::kSub + 2 * k, 4);
          const typename S::B wv = S::wb(w);
          FT_UNROLL for (int j = 0; j < NT; ++j) p[j][i] = S::dp(p[j][i], xk[j], wv);
        }
      }
      FT_UNROLL for (int i = 0; i < R; ++i) {
        const V sc = S::bcast(sm[i][s]);
        FT_UNROLL for (int j = 0; j < NT; ++j) acc[j][i] = S::fma(p[j][i], sc, acc[j][i]);
      }
      if (D::kMins)
        FT_UNROLL for (int j = 0; j < NT; ++j) {
          const V xs = S::load(XS + j * xss + (b * nsub + s) * kLanes);
          FT_UNROLL for (int i = 0; i < R; ++i) acc[j][i] = S::fma(S::bcast(sm[i][nsub + s]), xs, acc[j][i]);
        }
    }
  }
  alignas(64) float o[R][L];
  FT_UNROLL for (int j = 0; j < NT; ++j) {
    FT_UNROLL for (int i = 0; i < R; ++i) S::store(o[i], acc[j][i]);
    const int n = j + 1 < NT ? kLanes : nt;
    for (int t = 0; t < n; ++t)
      FT_UNROLL for (int i = 0; i < R; ++i) Y[(kLanes * j + t) * ldy + i] = o[i][t];
  }
}

template <class D, int L, int R, int NT>
inline void tiles(const WeightMat& m, int64_t r0, int64_t r1, const uint32_t* XT, int64_t xts, const float* XS,
                  int64_t xss, int nt, float* Y, int64_t ldy) {
  int64_t r = r0;
  for (; r + R <= r1; r += R) tile<D, L, R, NT>(m, r, XT, xts, XS, xss, nt, Y + (r - r0), ldy);
  for (; r < r1; ++r) tile<D, L, 1, NT>(m, r, XT, xts, XS, xss, nt, Y + (r - r0), ldy);
}

// Y[t, r - r0] = sum_c W[r, c] * X[t, c] (RowsBf16Fn) for the first tokens of X, with a decoder D
// (m.cols % D::kCols == 0): a tile of 16 lanes while 16 or at least D::kMin16 tokens remain, then one of 8 lanes
// if D::kMin8 .. 8 remain (kMin8 0: never). Returns the tokens done; the caller's row-wise kernel is the faster
// for the rest. Zen 4 core, [1024, 2048]: Q4_K row-wise 45 us a token, 8 lanes 313 us, 16 lanes 430 us a tile;
// MXFP4 row-wise 32 us a token, 16 lanes 400 us, 8 lanes no faster than row-wise.
template <class D, int R = 8>
inline int64_t rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                    float* Y, int64_t ldy) {
  if (m.cols % D::kCols) return 0;
  const int64_t xts = m.cols / 2 * kLanes, xss = m.cols / D::kSub * kLanes;  // one tile's XT, XS
  thread_local FloatBuf xtb, xsb;
  uint32_t* XT = reinterpret_cast<uint32_t*>(xtb.get(2 * xts));
  float* XS = D::kMins ? xsb.get(2 * xss) : nullptr;
  int64_t t0 = 0;
  for (;;) {
    const int64_t left = ntok - t0;
    if (left >= kLanes + D::kMin16) {  // two tiles of 16 lanes sharing each row's decode: 4 rows x 2 tiles
      const int nt = static_cast<int>(std::min<int64_t>(kLanes, left - kLanes));
      pack_x(X + t0 * ldx, ldx, kLanes, m.cols, XT, XS, D::kSub);
      pack_x(X + (t0 + kLanes) * ldx, ldx, nt, m.cols, XT + xts, XS ? XS + xss : nullptr, D::kSub);
      tiles<D, 16, R / 2, 2>(m, r0, r1, XT, xts, XS, xss, nt, Y + t0 * ldy, ldy);
      t0 += kLanes + nt;
      continue;
    }
    const bool wide = left >= kLanes || left >= D::kMin16, narrow = D::kMin8 && left >= D::kMin8 && left <= 8;
    if (!wide && !narrow) return t0;
    const int nt = static_cast<int>(std::min<int64_t>(kLanes, left));
    pack_x(X + t0 * ldx, ldx, nt, m.cols, XT, XS, D::kSub);
    if (wide)
      tiles<D, 16, R, 1>(m, r0, r1, XT, xts, XS, xss, nt, Y + t0 * ldy, ldy);
    else
      tiles<D, 8, R, 1>(m, r0, r1, XT, xts, XS, xss, nt, Y + t0 * ldy, ldy);
    t0 += nt;
  }
}

// The prefill kernel (decoder T) for the first tokens, then rest(X + done * ldx, ntok - done, Y + done * ldy)
// -- the caller's row-wise kernel -- for the tail it does faster (all of them when the kernel does none).
template <class T, class F>
inline void then_rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                      float* Y, int64_t ldy, F&& rest) {
  const int64_t done = rows<T>(m, r0, r1, X, ntok, ldx, Y, ldy);
  if (done < ntok) rest(X + done * ldx, ntok - done, Y + done * ldy);
}

}  // namespace
}  // namespace avx512bf16_tokgemm
}  // namespace ft
