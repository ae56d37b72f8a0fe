// Row kernels of Q4_K, Q5_K, Q6_K, Q3_K and Q2_K over fp32 activations with the codes used where they lie (layouts in
// cpu/formats.h), shared by x86_avx2_kquant.cpp and x86_avx512_kquant.cpp (each compiles its own copy with its
// ISA flags, as rows_common.h).
//
// L code bytes zero-extended to 32-bit lanes hold two nibbles each: the low nibble masked is q, the high
// nibble masked in place is 16 q, and both convert exactly with vcvtdq2ps, so 2L columns cost one widening,
// two masks, two conversions and two FMAs a token, with no decode pass through memory. A lane's columns are
// consecutive in both halves (Q4_K / Q5_K byte l of chunk j: columns 64j + l and 64j + 32 + l; Q6_K byte l of
// a half: columns l and l + 64, or l + 32 and l + 96), so x is read in its own order. Per sub-block and
// token the fp32 partial sum of code * x is scaled once: d sc, or d sc / 16 for the high nibbles (exact: a
// power of two); the mins (Q4_K, Q5_K: -(dmin m)) and Q6_K's code offset (-32 d sc) come in once per block as
// the 8-lane product of their vector with x's sums over the sub-blocks (taken once per call). Q5_K's fifth bit
// and Q6_K's two high bits are shifted and masked into the same lanes. The weight's parts are summed apart,
// so the result is within the split-term bound (tests/fp32_bounds.kquant_terms) of the exact one, not bit for
// bit the scalar kernel's.
//
// From 3 tokens a tile (Q3_K / Q2_K always; Q4_K / Q5_K on AVX-512, in tiles of 2 rows) the codes are multiplied
// by their scale once and added into the tokens' sums directly: the partials would not fit the registers.
//
// ISA traits N: rows_common.h's (V, L, zero, loadx, fma, add, hsum) plus Vi (int32 vector); u8(p): L bytes
// zero-extended; band(Vi, int); bor(Vi, Vi); shl<S>(Vi) (S < 0: right); cvt(Vi); mul(a, b); bcast(const float*);
// add8(V tot, __m256 v): tot plus v in 8 of its lanes.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf, kTokBlock
#include "cpu/arch/x86_kq_fields.h"  // f16_at, kq_fields6, q3k_scales16

namespace ft {
namespace {
namespace kq_nib {

constexpr int kAhead = 1024;  // software prefetch distance on each row's stream (rows of 0.4-1.2 KiB)

// Q4_K / Q5_K from 3 tokens on AVX-512: codes scaled once and 2 rows a tile sharing the x loads (one Zen 4 core,
// 4 tokens: Q4_K 28.6 -> 33.1 GMAC/s); on AVX2's 16 registers that tile spills (no gain), so the partials stay.
template <class N, int NT>
constexpr bool kScaled = NT >= 3 && N::L == 16;

// Q4_K / Q5_K (kFive). scales(b, sc, nm): sc[s] = d sc_s (s even: low nibbles) or d sc_s / 16 (s odd: high
// nibbles, read as 16 q); nm[0] = -(dmin m_s), s = 0..7.
template <class N, bool kFive>
struct Q45 {
  static constexpr int kBytes = kFive ? 176 : 144, kCodes = kFive ? 48 : 16, kSub = 32, kNm = 1;
  static void scales(const uint8_t* b, float* sc, __m256* nm) {
    const __m128i v = kq_fields6(b);  // scales 0..7, mins 0..7
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    _mm256_storeu_ps(sc, _mm256_mul_ps(s, _mm256_setr_ps(d, d / 16, d, d / 16, d, d / 16, d, d / 16)));
    nm[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))), _mm256_set1_ps(-dmin));
  }
  // Columns 64j + L g.. (low nibbles: q) and 64j + 32 + L g.. (high: 16 q) of block b.
  template <int j>
  static void codes(const uint8_t* b, int g, typename N::V& lo, typename N::V& hi) {
    const typename N::Vi v = N::u8(b + kCodes + 32 * j + N::L * g);
    if (!kFive) {
      lo = N::cvt(N::band(v, 0x0f));
      hi = N::cvt(N::band(v, 0xf0));
      return;
    }
    const typename N::Vi h = N::u8(b + 16 + N::L * g);  // bit 2j: the low column's fifth bit, 2j + 1: the high's
    lo = N::cvt(N::bor(N::band(v, 0x0f), N::band(N::template shl<4 - 2 * j>(h), 0x10)));
    hi = N::cvt(N::bor(N::band(v, 0xf0), N::band(N::template shl<7 - 2 * j>(h), 0x100)));
  }
  // NR rows x NT tokens of one block: tot[r][t] += sum over its 256 columns of code * scale * x.
  template <int NR, int NT>
  static void block(const uint8_t* const (&b)[NR], const float (&sc)[NR][16], const float* X, int64_t ldx,
                    typename N::V (&tot)[NR][NT]) {
    chunk<0, NR, NT>(b, sc, X, ldx, tot);
    chunk<1, NR, NT>(b, sc, X, ldx, tot);
    chunk<2, NR, NT>(b, sc, X, ldx, tot);
    chunk<3, NR, NT>(b, sc, X, ldx, tot);
  }
  template <int j, int NR, int NT>
  static void chunk(const uint8_t* const (&b)[NR], const float (&sc)[NR][16], const float* X, int64_t ldx,
                    typename N::V (&tot)[NR][NT]) {
    if constexpr (kScaled<N, NT>) {  // codes times their scale once, into the tokens' sums; x loads shared by rows
      FT_UNROLL for (int g = 0; g < 32 / N::L; ++g) {
        typename N::V lo[NR], hi[NR];
        FT_UNROLL for (int r = 0; r < NR; ++r) {
          codes<j>(b[r], g, lo[r], hi[r]);
          lo[r] = N::mul(lo[r], N::bcast(&sc[r][2 * j]));
          hi[r] = N::mul(hi[r], N::bcast(&sc[r][2 * j + 1]));
        }
        FT_UNROLL for (int t = 0; t < NT; ++t) {
          const float* x = X + t * ldx + 64 * j + N::L * g;
          const typename N::V x0 = N::loadx(x), x1 = N::loadx(x + 32);
          FT_UNROLL for (int r = 0; r < NR; ++r) tot[r][t] = N::fma(hi[r], x1, N::fma(lo[r], x0, tot[r][t]));
        }
      }
      return;
    }
    typename N::V pl[NR][NT], ph[NR][NT];
    FT_UNROLL for (int r = 0; r < NR; ++r) FT_UNROLL for (int t = 0; t < NT; ++t) pl[r][t] = ph[r][t] = N::zero();
    FT_UNROLL for (int g = 0; g < 32 / N::L; ++g) {
      FT_UNROLL for (int r = 0; r < NR; ++r) {
        typename N::V lo, hi;
        codes<j>(b[r], g, lo, hi);
        FT_UNROLL for (int t = 0; t < NT; ++t) {
          const float* x = X + t * ldx + 64 * j + N::L * g;
          pl[r][t] = N::fma(lo, N::loadx(x), pl[r][t]);
          ph[r][t] = N::fma(hi, N::loadx(x + 32), ph[r][t]);
        }
      }
    }
    FT_UNROLL for (int r = 0; r < NR; ++r) {
      const typename N::V s0 = N::bcast(&sc[r][2 * j]), s1 = N::bcast(&sc[r][2 * j + 1]);
      FT_UNROLL for (int t = 0; t < NT; ++t) tot[r][t] = N::fma(s1, ph[r][t], N::fma(s0, pl[r][t], tot[r][t]));
    }
  }
};

// Q6_K: half n of a block, byte l < 32 of ql (64n..) holds columns l (low nibble) and l + 64 (high), byte l of
// ql + 32 columns l + 32 and l + 96; qh byte l (128 + 32n..) bits 0-1, 2-3, 4-5, 6-7 are their high bits in that
// order; q = code - 32 over sub-blocks of 16 columns. scales: sc[s] = d sc_s (columns 0..63 of a half) or
// d sc_s / 16 (columns 64..127: read as 16 code); nm[2] = -32 d sc_s (the code offset), s = 0..15.
template <class N>
struct Q6 {
  static constexpr int kBytes = 210, kSub = 16, kNm = 2;
  using V = typename N::V;
  static void scales(const uint8_t* b, float* sc, __m256* nm) {
    const float d = f16_at(b + 208);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    const __m256 s0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)),
                 s1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
    const __m256 k = _mm256_setr_ps(d, d, d, d, d / 16, d / 16, d / 16, d / 16);
    _mm256_storeu_ps(sc, _mm256_mul_ps(s0, k));
    _mm256_storeu_ps(sc + 8, _mm256_mul_ps(s1, k));
    nm[0] = _mm256_mul_ps(s0, _mm256_set1_ps(-32.f * d));
    nm[1] = _mm256_mul_ps(s1, _mm256_set1_ps(-32.f * d));
  }
  // The code vectors of columns 128n + L g + 32k, k = 0..3 (k >= 2: 16 code).
  static void codes(const uint8_t* b, int n, int g, V (&w)[4]) {
    const uint8_t* ql = b + 64 * n + N::L * g;
    const typename N::Vi b1 = N::u8(ql), b2 = N::u8(ql + 32), h = N::u8(b + 128 + 32 * n + N::L * g);
    const typename N::Vi h4 = N::template shl<4>(h), h2 = N::template shl<2>(h);
    w[0] = N::cvt(N::bor(N::band(b1, 0x0f), N::band(h4, 0x30)));
    w[1] = N::cvt(N::bor(N::band(b2, 0x0f), N::band(h2, 0x30)));
    w[2] = N::cvt(N::bor(N::band(b1, 0xf0), N::band(h4, 0x300)));
    w[3] = N::cvt(N::bor(N::band(b2, 0xf0), N::band(h2, 0x300)));
  }
  template <int NR, int NT>
  static void block(const uint8_t* const (&b)[NR], const float (&sc)[NR][16], const float* X, int64_t ldx,
                    V (&tot)[NR][NT]) {
    constexpr int G = 16 / N::L;  // groups of L bytes a sub-block
    if constexpr (NT >= 3) {
      FT_UNROLL for (int n = 0; n < 2; ++n) FT_UNROLL for (int g = 0; g < 32 / N::L; ++g)
        FT_UNROLL for (int r = 0; r < NR; ++r) {
          V w[4];
          codes(b[r], n, g, w);
          FT_UNROLL for (int k = 0; k < 4; ++k) {
            const V ws = N::mul(w[k], N::bcast(&sc[r][8 * n + 2 * k + g / G]));
            FT_UNROLL for (int t = 0; t < NT; ++t)
              tot[r][t] = N::fma(ws, N::loadx(X + t * ldx + 128 * n + 32 * k + N::L * g), tot[r][t]);
          }
        }
      return;
    }
    FT_UNROLL for (int n = 0; n < 2; ++n) FT_UNROLL for (int u = 0; u < 2; ++u) {  // sub-block u of each quarter
      V p[4][NR][NT];
      FT_UNROLL for (int k = 0; k < 4; ++k) FT_UNROLL for (int r = 0; r < NR; ++r)
        FT_UNROLL for (int t = 0; t < NT; ++t) p[k][r][t] = N::zero();
      FT_UNROLL for (int g = G * u; g < G * u + G; ++g) FT_UNROLL for (int r = 0; r < NR; ++r) {
        V w[4];
        codes(b[r], n, g, w);
        FT_UNROLL for (int t = 0; t < NT; ++t) {
          const float* x = X + t * ldx + 128 * n + N::L * g;
          FT_UNROLL for (int k = 0; k < 4; ++k) p[k][r][t] = N::fma(w[k], N::loadx(x + 32 * k), p[k][r][t]);
        }
      }
      FT_UNROLL for (int r = 0; r < NR; ++r) FT_UNROLL for (int k = 0; k < 4; ++k) {
        const V s = N::bcast(&sc[r][8 * n + 2 * k + u]);  // sub-block (128n + 32k + 16u) / 16
        FT_UNROLL for (int t = 0; t < NT; ++t) tot[r][t] = N::fma(s, p[k][r][t], tot[r][t]);
      }
    }
  }
};

// Q3_K (kThree) and Q2_K: per half n of a block, byte l of the 2-bit codes (Q3_K: 32 + 32n.., Q2_K: 16 + 32n..)
// holds column 128n + 32j + l at bits 2j, 2j + 1, masked in place as 4^j q (sub-block (32j + l) / 16 + 8n).
// Q3_K's high bit of that column, bit 4n + j of hmask byte l, is shifted to bit 2j + 2 (4^j times 4 hbit): the
// code 0..7 stands for code - 4. scales: sc[s] = d (sc_s - 32) / 4^j (Q3_K) or d sc_s / 4^j (Q2_K), j the
// field of sub-block s; nm[2] = -4 d (sc_s - 32) (Q3_K's code offset) or -(dmin m_s) (Q2_K's mins). The codes
// are multiplied by their scale once and added into the tokens' sums (two 2-bit fields make too many
// partials to keep); one token takes 4 chains, one per field.
template <class N, bool kThree>
struct Q23 {
  static constexpr int kBytes = kThree ? 110 : 84, kCodes = kThree ? 32 : 16, kSub = 16, kNm = 2;
  using V = typename N::V;
  template <int NT>
  static constexpr int kChains = NT == 1 ? 4 : NT == 2 ? 2 : 1;  // FMA chains a token
  static void scales(const uint8_t* b, float* sc, __m256* nm) {
    const __m256 f = _mm256_setr_ps(1.f, 1.f, 0.25f, 0.25f, 0.0625f, 0.0625f, 0.015625f, 0.015625f);  // 4^-j
    __m256 s[2];
    float d, dmin = 0.f;
    if (kThree) {
      const __m128i v = _mm_sub_epi8(q3k_scales16(b), _mm_set1_epi8(32));  // sc - 32 in -32..31
      s[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
      s[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
      d = f16_at(b + 108);
    } else {  // byte k: scale (low nibble) and min (high) of sub-block k
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
      const __m256i a0 = _mm256_cvtepu8_epi32(v), a1 = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
      const __m256i m15 = _mm256_set1_epi32(15);
      s[0] = _mm256_cvtepi32_ps(_mm256_and_si256(a0, m15));
      s[1] = _mm256_cvtepi32_ps(_mm256_and_si256(a1, m15));
      d = f16_at(b + 80);
      dmin = f16_at(b + 82);
      nm[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(a0, 4)), _mm256_set1_ps(-dmin));
      nm[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(a1, 4)), _mm256_set1_ps(-dmin));
    }
    const __m256 dv = _mm256_set1_ps(d);
    _mm256_storeu_ps(sc, _mm256_mul_ps(_mm256_mul_ps(s[0], dv), f));
    _mm256_storeu_ps(sc + 8, _mm256_mul_ps(_mm256_mul_ps(s[1], dv), f));
    if (kThree) {
      nm[0] = _mm256_mul_ps(s[0], _mm256_set1_ps(-4.f * d));
      nm[1] = _mm256_mul_ps(s[1], _mm256_set1_ps(-4.f * d));
    }
  }
  // 4^j x the code of columns 128n + 32j + L g.. (Q3_K: with its high bit as 4^j 4 hbit).
  template <int n, int j>
  static V code(typename N::Vi q, typename N::Vi h) {
    typename N::Vi c = N::band(q, 3 << (2 * j));
    if (kThree) c = N::bor(c, N::band(N::template shl<j + 2 - 4 * n>(h), 1 << (2 * j + 2)));
    return N::cvt(c);
  }
  // Field j of row r's group g into the tokens' chains.
  template <int n, int j, int NR, int NT>
  static void field(typename N::Vi q, typename N::Vi h, const float* sc, const float* X, int64_t ldx, int g, int r,
                    V (&acc)[4][NR][NT]) {
    constexpr int U = kChains<NT>;
    const V ws = N::mul(code<n, j>(q, h), N::bcast(&sc[8 * n + 2 * j + g / (16 / N::L)]));
    FT_UNROLL for (int t = 0; t < NT; ++t)
      acc[j % U][r][t] = N::fma(ws, N::loadx(X + t * ldx + 128 * n + 32 * j + N::L * g), acc[j % U][r][t]);
  }
  template <int n, int NR, int NT>
  static void half(const uint8_t* const (&b)[NR], const float (&sc)[NR][16], const float* X, int64_t ldx,
                   V (&acc)[4][NR][NT]) {
    FT_UNROLL for (int g = 0; g < 32 / N::L; ++g) FT_UNROLL for (int r = 0; r < NR; ++r) {
      const typename N::Vi q = N::u8(b[r] + kCodes + 32 * n + N::L * g);
      const typename N::Vi h = kThree ? N::u8(b[r] + N::L * g) : q;
      field<n, 0, NR, NT>(q, h, sc[r], X, ldx, g, r, acc);
      field<n, 1, NR, NT>(q, h, sc[r], X, ldx, g, r, acc);
      field<n, 2, NR, NT>(q, h, sc[r], X, ldx, g, r, acc);
      field<n, 3, NR, NT>(q, h, sc[r], X, ldx, g, r, acc);
    }
  }
  template <int NR, int NT>
  static void block(const uint8_t* const (&b)[NR], const float (&sc)[NR][16], const float* X, int64_t ldx,
                    V (&tot)[NR][NT]) {
    constexpr int U = kChains<NT>;
    V acc[4][NR][NT];
    FT_UNROLL for (int r = 0; r < NR; ++r) FT_UNROLL for (int t = 0; t < NT; ++t) {
      acc[0][r][t] = tot[r][t];
      FT_UNROLL for (int u = 1; u < U; ++u) acc[u][r][t] = N::zero();
    }
    half<0, NR, NT>(b, sc, X, ldx, acc);
    half<1, NR, NT>(b, sc, X, ldx, acc);
    FT_UNROLL for (int r = 0; r < NR; ++r) FT_UNROLL for (int t = 0; t < NT; ++t) {
      V v = acc[0][r][t];
      FT_UNROLL for (int u = 1; u < U; ++u) v = N::add(v, acc[u][r][t]);
      tot[r][t] = v;
    }
  }
};

// xs[t * lds + s] = sum of X[t, kSub s .. kSub s + kSub - 1] (fp32).
template <int kSub>
inline void sub_sums(const float* X, int64_t ntok, int64_t ldx, int64_t cols, float* xs, int64_t lds) {
  for (int64_t t = 0; t < ntok; ++t)
    for (int64_t s = 0; s < cols / kSub; ++s) {
      __m256 a = _mm256_loadu_ps(X + t * ldx + kSub * s);
      FT_UNROLL for (int k = 8; k < kSub; k += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(X + t * ldx + kSub * s + k));
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      xs[t * lds + s] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    }
}

// NR rows from r x NT tokens: Y[t * ldy + i] = row r + i . token t.
template <class N, class D, int NR, int NT>
inline void tile(const WeightMat& m, int64_t r, const float* X, int64_t ldx, const float* xs, int64_t lds, float* Y,
                 int64_t ldy) {
  constexpr int kNs = kQK / D::kSub;  // sub-blocks a block: 8 or 16
  const int64_t nb = m.cols / kQK;
  typename N::V tot[NR][NT];
  FT_UNROLL for (int i = 0; i < NR; ++i) FT_UNROLL for (int t = 0; t < NT; ++t) tot[i][t] = N::zero();
  alignas(32) float sc[NR][16];
  for (int64_t blk = 0; blk < nb; ++blk) {
    const uint8_t* b[NR];
    __m256 nm[NR][D::kNm];
    FT_UNROLL for (int i = 0; i < NR; ++i) {
      b[i] = m.q + (r + i) * m.q_stride + blk * D::kBytes;
      FT_UNROLL for (int k = 0; k < D::kBytes + 63; k += 64)
        _mm_prefetch(reinterpret_cast<const char*>(b[i]) + kAhead + k, _MM_HINT_T0);
      D::scales(b[i], sc[i], nm[i]);
    }
    D::template block<NR, NT>(b, sc, X + blk * kQK, ldx, tot);
    FT_UNROLL for (int i = 0; i < NR; ++i) FT_UNROLL for (int t = 0; t < NT; ++t) FT_UNROLL for (int k = 0; k < D::kNm; ++k)
      tot[i][t] = N::add8(tot[i][t], _mm256_mul_ps(nm[i][k], _mm256_loadu_ps(xs + t * lds + blk * kNs + 8 * k)));
  }
  FT_UNROLL for (int i = 0; i < NR; ++i) FT_UNROLL for (int t = 0; t < NT; ++t) Y[t * ldy + i] = N::hsum(tot[i][t]);
}

template <class N, class D, int NT>
inline void rows_block(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ldx, const float* xs,
                       int64_t lds, float* Y, int64_t ldy) {
  // Q4_K / Q5_K in tiles of two rows: at one token for enough independent FMA chains (2 partials a row; Q6_K
  // has 4), from 3 tokens on AVX-512 so that each x load serves both rows.
  constexpr int NR = D::kSub == 32 && (NT == 1 || kScaled<N, NT>) ? 2 : 1;
  int64_t r = r0;
  for (; r + NR <= r1; r += NR) tile<N, D, NR, NT>(m, r, X, ldx, xs, lds, Y + (r - r0), ldy);
  for (; r < r1; ++r) tile<N, D, 1, NT>(m, r, X, ldx, xs, lds, Y + (r - r0), ldy);
}

// The RowsFn of Q4_K (D = Q45<N, false>), Q5_K (Q45<N, true>), Q6_K (Q6<N>), Q3_K (Q23<N, true>) or Q2_K
// (Q23<N, false>); check_mat has made sure cols % 256 == 0.
template <class N, class D>
inline void rows(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                 int64_t ldy) {
  const int64_t lds = m.cols / D::kSub;
  thread_local FloatBuf sbuf;
  float* xs = sbuf.get(ntok * lds);
  sub_sums<D::kSub>(X, ntok, ldx, m.cols, xs, lds);
  for (int64_t t = 0; t < ntok; t += kTokBlock) {
    const float* Xt = X + t * ldx;
    const float* st = xs + t * lds;
    float* Yt = Y + t * ldy;
    switch (std::min<int64_t>(kTokBlock, ntok - t)) {
      case 4: rows_block<N, D, 4>(m, r0, r1, Xt, ldx, st, lds, Yt, ldy); break;
      case 3: rows_block<N, D, 3>(m, r0, r1, Xt, ldx, st, lds, Yt, ldy); break;
      case 2: rows_block<N, D, 2>(m, r0, r1, Xt, ldx, st, lds, Yt, ldy); break;
      default: rows_block<N, D, 1>(m, r0, r1, Xt, ldx, st, lds, Yt, ldy); break;
    }
  }
}

}  // namespace kq_nib
}  // namespace
}  // namespace ft
