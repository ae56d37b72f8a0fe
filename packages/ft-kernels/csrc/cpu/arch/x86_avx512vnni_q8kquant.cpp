// AVX-512 VNNI, int8 activations (cpu/q8.h) for GGUF's K-quants (Q4_K, Q5_K, Q6_K, Q3_K, Q2_K; layouts in
// cpu/formats.h):
// `vpdpbusd` (unsigned codes x signed int8 x, 4 products summed into each int32 lane) on the blocks' own bytes.
//
// A super-block of 256 columns is two chunks of 128. One 64-byte load of a chunk's nibbles gives two vectors
// of 64 unsigned codes, u0 (low nibbles) and u1 (high nibbles); Q5_K's fifth bit and Q6_K's two high bits are
// joined from a broadcast of the block's high-bit bytes by one ternary-logic op each. x is put once per call
// in the matching order (per chunk: the 64 columns of u0, then those of u1), so lane i of
// vpdpbusd(u, x) is the integer dot of 4 columns that share one weight sub-block (32 columns; Q6_K 16) and
// one activation block (32). Then per lane and token one conversion and one FMA with (weight scale x
// activation scale). Q4_K and Q5_K's mins come in once per block and token as -(dmin m) * d_x * sum(q) over
// each sub-block (8 lanes, one FMA), Q6_K's code offset 32 likewise as 32 * d sc * d_x * sum(q) over each
// sub-block of 16 (16 lanes). Exact integer dots; the fp32 scaling differs from the scalar twin
// (scalar_q8.cpp) only in rounding order.
//
// Per 128 Q4_K weights and token: 2 vpdpbusd, 2 conversions, 2 products of scales, 2 FMAs, after a 3-op
// decode and 2 scale permutes shared by the tile's tokens.
#include <immintrin.h>

#include <algorithm>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf, kTokBlock
#include "cpu/arch/x86_avx512_kq_scales.h"
#include "cpu/arch/x86_avx512_nib.h"  // kAhead
#include "cpu/arch/x86_kq_fields.h"   // q3k_scales16
#include "cpu/q8.h"

namespace ft {
namespace {

inline __m512i idx16(int a, int b) {  // lanes 0..7 = a, 8..15 = b
  return _mm512_mask_mov_epi32(_mm512_set1_epi32(a), 0xff00, _mm512_set1_epi32(b));
}

// Formats: kBytes per block, kCodes (offset of the nibbles), kMins, kOffset (the codes' offset); xorder: the
// chunk's activation order from its natural columns N0 = 0..63, N1 = 64..127 (two 64-byte vectors);
// act(h, k): the activation block (0..3 in the chunk) of lanes 0..7 (k = 0) / 8..15 (k = 1) of u0 and u1:
// dsel[v] = (block of lanes 0..7, block of lanes 8..15) for v = u0, u1; wsel(h)[v]: the same for the weight
// sub-blocks; codes(b, h, u0, u1).
template <bool kFive>
struct QnK {  // Q4_K, Q5_K: chunk h holds sub-blocks 4h..4h+3; low nibbles of bytes 0..31 are columns 0..31,
              // of bytes 32..63 columns 64..95; high nibbles columns 32..63 and 96..127
  static constexpr int kBytes = kFive ? 176 : 144, kCodes = kFive ? 48 : 16, kOffset = 0;
  static constexpr bool kMins = true;
  static void xorder(__m512i n0, __m512i n1, __m512i& x0, __m512i& x1) {
    x0 = _mm512_shuffle_i64x2(n0, n1, _MM_SHUFFLE(1, 0, 1, 0));  // columns 0..31, 64..95
    x1 = _mm512_shuffle_i64x2(n0, n1, _MM_SHUFFLE(3, 2, 3, 2));  // columns 32..63, 96..127
  }
  static constexpr int dsel[2][2] = {{0, 2}, {1, 3}};
  static __m512i wsel(int h, int v) { return idx16(4 * h + v, 4 * h + 2 + v); }
  static __m512 scales(const uint8_t* b) { return kq_scale_vec(b); }
  // Q5_K's fifth bit of u0's byte l (l < 32) is bit 4h of qh byte l, of byte 32 + l bit 4h + 2 (u1: one more):
  // qh broadcast to both halves and shifted right by 2 in the upper one puts them at 4h (u0), 4h + 1 (u1).
  static void codes(const uint8_t* b, int h, __m512i& u0, __m512i& u1) {
    const __m512i v = _mm512_loadu_si512(b + kCodes + 64 * h), lo4 = _mm512_set1_epi8(0x0f);
    u0 = _mm512_and_si512(v, lo4);
    u1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
    if (kFive) {
      __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
      qh = _mm512_mask_srli_epi16(qh, 0xffff0000u, qh, 2);
      const __m512i b4 = _mm512_set1_epi8(0x10);
      const __m512i h0 = h ? qh : _mm512_slli_epi16(qh, 4), h1 = h ? _mm512_srli_epi16(qh, 1) : _mm512_slli_epi16(qh, 3);
      u0 = _mm512_ternarylogic_epi32(u0, h0, b4, 0xf8);  // u | (h & 0x10)
      u1 = _mm512_ternarylogic_epi32(u1, h1, b4, 0xf8);
    }
  }
};

struct Q6K {  // half h: ql bytes 64h.. (low nibbles: columns 0..63 of the half, high: 64..127), qh bytes 128 + 32h..
  static constexpr int kBytes = 210, kOffset = 32;
  static constexpr bool kMins = false;
  static void xorder(__m512i n0, __m512i n1, __m512i& x0, __m512i& x1) {
    x0 = n0;
    x1 = n1;
  }
  static constexpr int dsel[2][2] = {{0, 1}, {2, 3}};
  static __m512i wsel(int h, int v) {  // sub-blocks of 16: lane i of u_v covers columns 64v + 4i ..
    return _mm512_add_epi32(_mm512_set1_epi32(8 * h + 4 * v), _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2));
  }
  static __m512 scales(const uint8_t* b) { return q6k_scale_vec(b); }
  static __m512 offv(const uint8_t*, __m512 sm) { return sm; }
  // qh byte l holds the 2 high bits of columns l, l + 32, l + 64, l + 96 (bits 0-1, 2-3, 4-5, 6-7): broadcast
  // and shifted right by 2 in the upper half, bits 0-1 serve u0 and bits 4-5 u1 in every byte.
  static void codes(const uint8_t* b, int h, __m512i& u0, __m512i& u1) {
    const __m512i v = _mm512_loadu_si512(b + 64 * h), lo4 = _mm512_set1_epi8(0x0f);
    __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
    qh = _mm512_and_si512(_mm512_mask_srli_epi16(qh, 0xffff0000u, qh, 2), _mm512_set1_epi8(0x33));
    u0 = _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(qh, 4), lo4, 0xe4);  // low nibble ? v : high bits
    u1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), qh, lo4, 0xe4);
  }
};

// Q3_K / Q2_K (layouts in cpu/formats.h): sub-blocks of 16 and codes in natural column order, as Q6_K's. Half h:
// the 32 bytes of 2-bit codes broadcast to both halves of a vector and shifted right by 2 in the upper one give
// u0 (columns 0..31: bits 0-1 of the lower half; 32..63: of the upper) and u1 (64..127: bits 4-5). The weight is
// f u - o per sub-block: Q3_K u = low + 4 high in 0..7, f = d (sc - 32), o = 4 f (kOffset 4); Q2_K u in 0..3,
// f = d sc, o = dmin m (offv, kOffset 1).
struct Q23Base {
  static constexpr bool kMins = false;
  static void xorder(__m512i n0, __m512i n1, __m512i& x0, __m512i& x1) {
    x0 = n0;
    x1 = n1;
  }
  static constexpr int dsel[2][2] = {{0, 1}, {2, 3}};
  static __m512i wsel(int h, int v) { return Q6K::wsel(h, v); }
  static void low2(const uint8_t* p, __m512i& l0, __m512i& l1) {  // unmasked: the caller keeps bits 0-1
    __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    l0 = _mm512_mask_srli_epi16(q, 0xffff0000u, q, 2);
    l1 = _mm512_srli_epi16(l0, 4);
  }
};

struct Q3K : Q23Base {
  static constexpr int kBytes = 110, kOffset = 4;
  static __m512 scales(const uint8_t* b) {
    const __m128i s = _mm_sub_epi8(q3k_scales16(b), _mm_set1_epi8(32));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s)), _mm512_set1_ps(_cvtsh_ss(static_cast<uint16_t>(b[108] | (b[109] << 8)))));
  }
  static __m512 offv(const uint8_t*, __m512 sm) { return sm; }
  // High bit of column 128h + 32j + l: bit 4h + j of hmask byte l; shifted right by 1 in the upper half, bit
  // 4h serves u0 and 4h + 2 u1 in every byte, moved to bit 2.
  static void codes(const uint8_t* b, int h, __m512i& u0, __m512i& u1) {
    __m512i l0, l1;
    low2(b + 32 + 32 * h, l0, l1);
    __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    hm = _mm512_mask_srli_epi16(hm, 0xffff0000u, hm, 1);
    const __m512i h0 = h ? _mm512_srli_epi16(hm, 2) : _mm512_slli_epi16(hm, 2), h1 = h ? _mm512_srli_epi16(hm, 4) : hm;
    const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
    u0 = _mm512_ternarylogic_epi32(l0, _mm512_and_si512(h0, m4), m3, 0xec);  // (l & 3) | h
    u1 = _mm512_ternarylogic_epi32(l1, _mm512_and_si512(h1, m4), m3, 0xec);
  }
};

struct Q2K : Q23Base {
  static constexpr int kBytes = 84, kOffset = 1;
  static __m512 scales(const uint8_t* b) {
    const __m128i v = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), _mm_set1_epi8(0x0f));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)), _mm512_set1_ps(_cvtsh_ss(static_cast<uint16_t>(b[80] | (b[81] << 8)))));
  }
  static __m512 offv(const uint8_t* b, __m512) {
    const __m128i v = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 4), _mm_set1_epi8(0x0f));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)), _mm512_set1_ps(_cvtsh_ss(static_cast<uint16_t>(b[82] | (b[83] << 8)))));
  }
  static void codes(const uint8_t* b, int h, __m512i& u0, __m512i& u1) {
    __m512i l0, l1;
    low2(b + 16 + 32 * h, l0, l1);
    u0 = _mm512_and_si512(l0, _mm512_set1_epi8(3));
    u1 = _mm512_and_si512(l1, _mm512_set1_epi8(3));
  }
};

// The activations of nt tokens in chunk order. Per token and chunk: x (128 B) and d (2 x 16 lane scales); per
// token and block of 32 (Q4_K, Q5_K) m = d * sum(q).
struct Prep {
  int8_t* x;  // [nt][nch][128]
  float* d;   // [nt][nch][32]
  float* m;   // [nt][nblk]
};

// Q8Act's block of 32 holds the even columns, then the odd ones: two blocks at p back in natural order.
inline __m512i natural(const int8_t* p) {
  const __m512i v = _mm512_loadu_si512(p);
  const __m512i e = _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 2, 0, 0)), o = _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(3, 3, 1, 1));
  return _mm512_mask_blend_epi64(0xcc, _mm512_unpacklo_epi8(e, o), _mm512_unpackhi_epi8(e, o));
}

template <class D>
inline void prep(const Q8Act& a, int64_t t0, int nt, int64_t nch, const Prep& p) {
  const __m512i ds[2] = {idx16(D::dsel[0][0], D::dsel[0][1]), idx16(D::dsel[1][0], D::dsel[1][1])};
  for (int t = 0; t < nt; ++t) {
    const int8_t* q = a.q + (t0 + t) * a.ldq;
    const float* d = a.d + (t0 + t) * a.ldb;
    for (int64_t k = 0; k < nch; ++k) {
      __m512i x[2];
      D::xorder(natural(q + 128 * k), natural(q + 128 * k + 64), x[0], x[1]);
      const int64_t at = t * nch + k;
      const __m512 d4 = _mm512_castps128_ps512(_mm_loadu_ps(d + 4 * k));
      FT_UNROLL for (int v = 0; v < 2; ++v) {
        _mm512_storeu_si512(p.x + 128 * at + 64 * v, x[v]);
        _mm512_storeu_ps(p.d + 32 * at + 16 * v, _mm512_permutexvar_ps(ds[v], d4));
      }
    }
    if (D::kMins) {
      const float* sd = a.sd + (t0 + t) * 2 * a.ldb;
      for (int64_t b = 0; b < 4 * nch; ++b) p.m[t * 4 * nch + b] = sd[2 * b] + sd[2 * b + 1];
    }
  }
}

template <class D, int NT, int PF>
inline void tile(const uint8_t* row, int64_t nsb, const __m512i (&ws)[2][2], const Prep& p, int64_t nch,
                 const float* sd, int64_t ldsd, float* Y, int64_t ldy) {
  __m512 a0[NT], a1[NT], off[NT];
  __m256 mins[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) {
    a0[t] = a1[t] = off[t] = _mm512_setzero_ps();
    mins[t] = _mm256_setzero_ps();
  }
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* blk = row + D::kBytes * sb;
    if (PF) FT_UNROLL for (int i = 0; i < D::kBytes + 63; i += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + PF + i, _MM_HINT_T0);
    const __m512 sm = D::scales(blk);
    FT_UNROLL for (int h = 0; h < 2; ++h) {
      __m512i u0, u1;
      D::codes(blk, h, u0, u1);
      const __m512 s0 = _mm512_permutexvar_ps(ws[h][0], sm), s1 = _mm512_permutexvar_ps(ws[h][1], sm);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const int64_t at = t * nch + 2 * sb + h;
        const __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u0, _mm512_loadu_si512(p.x + 128 * at));
        const __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u1, _mm512_loadu_si512(p.x + 128 * at + 64));
        a0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), _mm512_mul_ps(s0, _mm512_loadu_ps(p.d + 32 * at)), a0[t]);
        a1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), _mm512_mul_ps(s1, _mm512_loadu_ps(p.d + 32 * at + 16)), a1[t]);
      }
    }
    if (D::kMins) {
      const __m256 nm = _mm512_extractf32x8_ps(sm, 1);
      FT_UNROLL for (int t = 0; t < NT; ++t) mins[t] = _mm256_fmadd_ps(nm, _mm256_loadu_ps(p.m + t * 4 * nch + 8 * sb), mins[t]);
    }
    if constexpr (D::kOffset != 0) {  // sd: d_x * sum(q) over the block's 16 sub-blocks of 16
      const __m512 ov = D::offv(blk, sm);
      FT_UNROLL for (int t = 0; t < NT; ++t) off[t] = _mm512_fmadd_ps(ov, _mm512_loadu_ps(sd + t * ldsd + 16 * sb), off[t]);
    }
  }
  FT_UNROLL for (int t = 0; t < NT; ++t) {
    __m512 s = _mm512_add_ps(a0[t], a1[t]);
    if (D::kMins) s = _mm512_add_ps(s, _mm512_insertf32x8(_mm512_setzero_ps(), mins[t], 0));
    Y[t * ldy] = _mm512_reduce_add_ps(s) - (D::kOffset ? D::kOffset * _mm512_reduce_add_ps(off[t]) : 0.f);
  }
}

template <class D>
void rows(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  const int64_t nsb = m.cols / kQK, nch = 2 * nsb;
  thread_local FloatBuf bx, bd, bm;
  const Prep p{reinterpret_cast<int8_t*>(bx.get(kTokBlock * nch * 32)), bd.get(kTokBlock * nch * 32),
               bm.get(kTokBlock * nch * 4)};
  __m512i ws[2][2];
  for (int h = 0; h < 2; ++h)
    for (int v = 0; v < 2; ++v) ws[h][v] = D::wsel(h, v);
  for (int64_t t0 = 0; t0 < x.ntok; t0 += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, x.ntok - t0));
    prep<D>(x, t0, nt, nch, p);
    float* Yt = Y + t0 * ldy;
    const float* sd = x.sd + t0 * 2 * x.ldb;
    const int64_t ldsd = 2 * x.ldb;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = m.q + r * m.q_stride;
      switch (nt) {
        case 4: tile<D, 4, avx512_nib::kAhead>(row, nsb, ws, p, nch, sd, ldsd, Yt + (r - r0), ldy); break;
        case 3: tile<D, 3, avx512_nib::kAhead>(row, nsb, ws, p, nch, sd, ldsd, Yt + (r - r0), ldy); break;
        case 2: tile<D, 2, avx512_nib::kAhead>(row, nsb, ws, p, nch, sd, ldsd, Yt + (r - r0), ldy); break;
        default: tile<D, 1, avx512_nib::kAhead>(row, nsb, ws, p, nch, sd, ldsd, Yt + (r - r0), ldy); break;
      }
    }
  }
}

}  // namespace

void rows_q8_q4k_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows<QnK<false>>(m, r0, r1, x, Y, ldy);
}
void rows_q8_q5k_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows<QnK<true>>(m, r0, r1, x, Y, ldy);
}
void rows_q8_q3k_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows<Q3K>(m, r0, r1, x, Y, ldy);
}
void rows_q8_q2k_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows<Q2K>(m, r0, r1, x, Y, ldy);
}
void rows_q8_q6k_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows<Q6K>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
