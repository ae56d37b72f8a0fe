// AVX-512 VNNI, int8 activations (cpu/q8.h) for MXFP4, NVFP4 and INT4 weights: `vpdpbusd` (unsigned codes x
// signed int8 x, 4 products summed into each int32 lane) over chunks of 128 columns.
//
// One 64-byte load holds the weights of 4 blocks of 32 columns; its low nibbles (even columns) and high nibbles
// (odd columns) become unsigned codes: 2 * e2m1 + 12 through vpshufb (MXFP4 / NVFP4) or the nibble itself
// (INT4). x is put once per call in the matching order (per chunk: the 4 blocks' even halves, then their odd
// halves), so two vpdpbusd leave in lane i the integer dot of the chunk's columns 8i..8i+7 -- one scale block
// (x86_avx512_nib.h gives the weight scales per lane) and one activation block (d per lane, prepared). The
// codes' offset o (12, 8 or the INT4 zero point) comes off in the integers: each lane starts at
// -o * sum(q over its 8 columns). Then one conversion and one FMA per lane and token: 2 + 3 instructions per
// 128 weights and token, after a 6-instruction decode shared by the tile's 4 tokens. Exact integer dots; the
// fp32 scaling differs from the scalar twin (scalar_q8.cpp) only in summation order.
#include <immintrin.h>

#include <algorithm>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf, kTokBlock
#include "cpu/arch/x86_avx512_nib.h"
#include "cpu/q8.h"

namespace ft {

void rows_q8_int4_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy);

namespace {

using namespace avx512_nib;

struct E2m1Codes {  // 2 * e2m1 + 12 in 0..24; the scale tables hold e2m1's own value: post-multiply by 0.5
  static constexpr int kOffset = 12;
  static constexpr float kCodeScale = 0.5f;
  static __m512i codes(__m512i n) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    return _mm512_shuffle_epi8(lut, n);
  }
};
struct Mxfp4Q8 : Mxfp4Lanes, E2m1Codes {};
struct Nvfp4Q8 : Nvfp4Lanes, E2m1Codes {};
template <bool kAsym, int kG>
struct Int4Q8 : Int4Lanes<kAsym, kG> {
  static constexpr int kOffset = 8;  // sym; asym: the zero point per lane
  static constexpr float kCodeScale = 1.f;
  static __m512i codes(__m512i n) { return n; }
};

// The activations of nt tokens in chunk order: per chunk xe (64 B), xo (64 B); per lane d and -o * sum(q).
struct Prep {
  int8_t* x;     // [nt][nch][128]
  float* d;      // [nt][nch][16]
  int32_t* s;    // [nt][nch][16]: sum of q over the lane's 8 columns (times -o unless kZero)
};

template <class D>
inline void prep(const Q8Act& a, int64_t t0, int nt, int64_t nblk, int64_t nch, const Prep& p) {
  const __m512i ie = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), io = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int t = 0; t < nt; ++t) {
    const int8_t* q = a.q + (t0 + t) * a.ldq;
    const float* d = a.d + (t0 + t) * a.ldb;
    for (int64_t k = 0; k < nch; ++k) {
      const int64_t nb = std::min<int64_t>(4, nblk - 4 * k);  // blocks in this chunk
      const __mmask64 m0 = nb >= 2 ? ~__mmask64(0) : (__mmask64(1) << 32) - 1;
      const __mmask64 m1 = nb >= 4 ? ~__mmask64(0) : nb == 3 ? (__mmask64(1) << 32) - 1 : 0;
      const __m512i A = _mm512_maskz_loadu_epi8(m0, q + 128 * k), B = _mm512_maskz_loadu_epi8(m1, q + 128 * k + 64);
      const __m512i xe = _mm512_permutex2var_epi64(A, ie, B), xo = _mm512_permutex2var_epi64(A, io, B);
      const int64_t at = (t * nch + k);
      _mm512_storeu_si512(p.x + 128 * at, xe);
      _mm512_storeu_si512(p.x + 128 * at + 64, xo);
      __m512 dv = _mm512_set1_ps(d[4 * k]);
      if (nb > 1) dv = _mm512_mask_broadcastss_ps(dv, 0xfff0, _mm_load_ss(d + 4 * k + 1));
      if (nb > 2) dv = _mm512_mask_broadcastss_ps(dv, 0xff00, _mm_load_ss(d + 4 * k + 2));
      if (nb > 3) dv = _mm512_mask_broadcastss_ps(dv, 0xf000, _mm_load_ss(d + 4 * k + 3));
      if (nb < 4) dv = _mm512_maskz_mov_ps(static_cast<__mmask16>((1u << (4 * nb)) - 1), dv);
      _mm512_storeu_ps(p.d + 16 * at, dv);
      __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xe), ones, xo);
      if (!D::kZero) s = _mm512_mullo_epi32(s, _mm512_set1_epi32(-D::kOffset));
      _mm512_storeu_si512(p.s + 16 * at, s);
    }
  }
}

template <class D, int NT, int PF>
inline void tile(const WeightMat& m, int64_t r, int64_t nblk, int64_t nch, const Prep& p, float* Y, int64_t ldy) {
  const __m512i lo4 = _mm512_set1_epi8(0x0f);
  __m512 acc[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const uint8_t* row = m.q + r * m.q_stride;
  if (PF) prefetch_side<D>(m, r);
  for (int64_t k = 0; k < nch; ++k) {
    const uint8_t* qp = row + 64 * k;
    if (PF) _mm_prefetch(reinterpret_cast<const char*>(qp) + PF, _MM_HINT_T0);
    const int64_t nb = std::min<int64_t>(4, nblk - 4 * k);
    const __m512i v = nb == 4 ? _mm512_loadu_si512(qp) : _mm512_maskz_loadu_epi8((__mmask64(1) << (16 * nb)) - 1, qp);
    const __m512i ul = D::codes(_mm512_and_si512(v, lo4)), uh = D::codes(_mm512_and_si512(_mm512_srli_epi16(v, 4), lo4));
    const __m512 sw = D::scales(m, r, k);
    __m512i zl = _mm512_setzero_si512();
    if (D::kZero) zl = _mm512_cvtps_epi32(D::zeros(m, r, k));
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      const int64_t at = t * nch + k;
      __m512i s = _mm512_loadu_si512(p.s + 16 * at);
      if (D::kZero) s = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_mullo_epi32(s, zl));
      const __m512i xe = _mm512_loadu_si512(p.x + 128 * at), xo = _mm512_loadu_si512(p.x + 128 * at + 64);
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(s, ul, xe), uh, xo);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sw, _mm512_loadu_ps(p.d + 16 * at)), acc[t]);
    }
  }
  const float post = D::post(m) * D::kCodeScale;
  FT_UNROLL for (int t = 0; t < NT; ++t) Y[t * ldy] = _mm512_reduce_add_ps(acc[t]) * post;
}

template <class D>
void rows(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  const int64_t nblk = m.cols / 32, nch = (nblk + 3) / 4;
  thread_local FloatBuf bx, bd, bs;
  const Prep p{reinterpret_cast<int8_t*>(bx.get(kTokBlock * nch * 32)), bd.get(kTokBlock * nch * 16),
               reinterpret_cast<int32_t*>(bs.get(kTokBlock * nch * 16))};
  for (int64_t t0 = 0; t0 < x.ntok; t0 += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, x.ntok - t0));
    prep<D>(x, t0, nt, nblk, nch, p);
    float* Yt = Y + t0 * ldy;
    for (int64_t r = r0; r < r1; ++r) {
      switch (nt) {
        case 4: tile<D, 4, 0>(m, r, nblk, nch, p, Yt + (r - r0), ldy); break;
        case 3: tile<D, 3, 0>(m, r, nblk, nch, p, Yt + (r - r0), ldy); break;
        case 2: tile<D, 2, 0>(m, r, nblk, nch, p, Yt + (r - r0), ldy); break;
        default: tile<D, 1, kAhead>(m, r, nblk, nch, p, Yt + (r - r0), ldy); break;
      }
    }
  }
}

}  // namespace

void rows_q8_mxfp4_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows<Mxfp4Q8>(m, r0, r1, x, Y, ldy);
}
void rows_q8_nvfp4_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows<Nvfp4Q8>(m, r0, r1, x, Y, ldy);
}
void rows_q8_int4_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  if (!int4_lane_groups(m.group))
    rows_q8_int4_avx2(m, r0, r1, x, Y, ldy);
  else
    with_int4_lanes<Int4Q8>(m, [&](auto d) { rows<decltype(d)>(m, r0, r1, x, Y, ldy); });
}

}  // namespace ft
