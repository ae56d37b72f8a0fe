// The decode-attention task of cpu/attn_decode.h, written once over ISA traits I (as rows_common.h): the
// key and value rows are read once for the G query heads that share them, scores and the weighted value sum
// in I's vectors, the exp of a block's scores in a branch-free loop the compiler vectorises. Each ISA file
// (x86_avx2_attn.cpp, x86_avx512_attn.cpp; scalar_attn.cpp and arm_neon_attn.cpp with ScalarAttn below)
// includes it and is compiled with its own flags; everything is in an anonymous namespace, so no file's
// instructions leak into another's symbols.
//
// Traits I: using V; L (fp32 lanes); zero(); bcast(float); fma(a, b, c) = a * b + c; add; sub; mul; max;
//           hsum(V); hmax(V); round(V) (to nearest); pow2(V n) (2^n, n integral); zero_below(x, lim, v);
//           load(const float*), load(const uint16_t*) (bf16 widened, exact); store(float*, V). Unaligned.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/arch/rows_common.h"  // FloatBuf, FT_UNROLL, formats.h (bf16_to_f32)
#include "cpu/attn_decode.h"

namespace ft {
namespace {

// Keys per online-softmax block (scores of G heads x 64 keys stay in L1); a multiple of every ISA's lanes.
constexpr int64_t kKeyBlock = 64;

inline float ld(const float* p, int64_t i) { return p[i]; }
inline float ld(const uint16_t* p, int64_t i) { return bf16_to_f32(p[i]); }  // exact

// The traits of the scalar and NEON builds (one lane; the compiler may vectorise around it).
struct ScalarAttn {
  using V = float;
  static constexpr int L = 1;
  static V zero() { return 0.f; }
  static V bcast(float s) { return s; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V max(V a, V b) { return a > b ? a : b; }  // b when either is NaN, as maxps
  static float hsum(V v) { return v; }
  static float hmax(V v) { return v; }
  static V round(V x) { return (x + 12582912.f) - 12582912.f; }  // to nearest even, |x| < 2^22 (1.5 * 2^23 trick)
  static V pow2(V n) {  // 2^n for integral n in [-126, 127], built in the exponent bits
    const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  static V zero_below(V x, float lim, V v) { return x < lim ? 0.f : v; }  // v when x is NaN
  static V load(const float* p) { return *p; }
  static V load(const uint16_t* p) { return ld(p, 0); }
  static void store(float* p, V v) { *p = v; }
};

// e^x for x <= 0 in fp32 (0 below -87), lane by lane: x = n ln2 + r, |r| <= ln2 / 2 (n rounded to nearest,
// ln2 split in a 16-bit head, so n * head is exact, and a tail), e^r by its degree-7 Taylor polynomial
// (truncation < 0.35^8 / 8! = 5e-9 < u / 3), times 2^n built in the exponent bits. Relative error below 16 u
// (u = 2^-24): 7 Horner roundings on values in [0.7, 1.5], the reduction's rounding (u |r|), the final product.
template <class I>
inline typename I::V exp_neg_v(typename I::V x) {
  using V = typename I::V;
  const V xc = I::max(I::bcast(-87.f), x);  // NaN stays NaN (max returns its second operand then)
  const V n = I::round(I::mul(xc, I::bcast(1.44269504088896341f)));
  const V r = I::fma(n, I::bcast(-1.42860682030941723e-6f), I::fma(n, I::bcast(-0.693145751953125f), xc));
  V p = I::bcast(1.f / 5040.f);
  p = I::fma(p, r, I::bcast(1.f / 720.f));
  p = I::fma(p, r, I::bcast(1.f / 120.f));
  p = I::fma(p, r, I::bcast(1.f / 24.f));
  p = I::fma(p, r, I::bcast(1.f / 6.f));
  p = I::fma(p, r, I::bcast(0.5f));
  p = I::fma(p, r, I::bcast(1.f));
  p = I::fma(p, r, I::bcast(1.f));
  return I::zero_below(x, -87.f, I::mul(p, I::pow2(n)));
}
inline float exp_neg(float x) { return exp_neg_v<ScalarAttn>(x); }

// Scores of GN query heads against one key row (read once): out[g * ostride] = scale * q[g] . k.
template <class I, int GN, class KT>
inline void score_tile(const float* __restrict q, int64_t D, const KT* __restrict k, float scale, float* out,
                       int64_t ostride) {
  typename I::V acc[GN];
  FT_UNROLL for (int g = 0; g < GN; ++g) acc[g] = I::zero();
  int64_t i = 0;
  for (; i + I::L <= D; i += I::L) {
    const typename I::V kv = I::load(k + i);
    FT_UNROLL for (int g = 0; g < GN; ++g) acc[g] = I::fma(I::load(q + g * D + i), kv, acc[g]);
  }
  FT_UNROLL for (int g = 0; g < GN; ++g) {
    float sum = I::hsum(acc[g]);
    for (int64_t t = i; t < D; ++t) sum += q[g * D + t] * ld(k, t);
    out[g * ostride] = scale * sum;
  }
}

// acc[g] += sum_jj p[g * pstride + jj] v[jj] over a block's nb value rows (v[jj] = vpool + rows[jj] * Dv), GN
// heads: 2L columns at a time with the 2 GN sums in registers while the block's rows (in cache, prefetched while
// the block before ran) stream by -- the keys in order, as one running sum per element.
template <class I, int GN, class VT>
inline void value_tile(float* __restrict acc, int64_t Dv, const float* p, int64_t pstride, const VT* vpool,
                       const int64_t* rows, int64_t nb) {
  using V = typename I::V;
  int64_t i = 0;
  for (; i + 2 * I::L <= Dv; i += 2 * I::L) {
    V a0[GN], a1[GN];
    FT_UNROLL for (int g = 0; g < GN; ++g) a0[g] = I::load(acc + g * Dv + i), a1[g] = I::load(acc + g * Dv + i + I::L);
    for (int64_t jj = 0; jj < nb; ++jj) {
      const VT* vr = vpool + rows[jj] * Dv + i;
      const V v0 = I::load(vr), v1 = I::load(vr + I::L);
      FT_UNROLL for (int g = 0; g < GN; ++g) {
        const V pv = I::bcast(p[g * pstride + jj]);
        a0[g] = I::fma(pv, v0, a0[g]);
        a1[g] = I::fma(pv, v1, a1[g]);
      }
    }
    FT_UNROLL for (int g = 0; g < GN; ++g) I::store(acc + g * Dv + i, a0[g]), I::store(acc + g * Dv + i + I::L, a1[g]);
  }
  for (; i + I::L <= Dv; i += I::L) {
    V a0[GN];
    FT_UNROLL for (int g = 0; g < GN; ++g) a0[g] = I::load(acc + g * Dv + i);
    for (int64_t jj = 0; jj < nb; ++jj) {
      const V v0 = I::load(vpool + rows[jj] * Dv + i);
      FT_UNROLL for (int g = 0; g < GN; ++g) a0[g] = I::fma(I::bcast(p[g * pstride + jj]), v0, a0[g]);
    }
    FT_UNROLL for (int g = 0; g < GN; ++g) I::store(acc + g * Dv + i, a0[g]);
  }
  for (; i < Dv; ++i)
    for (int64_t jj = 0; jj < nb; ++jj)
      for (int g = 0; g < GN; ++g) acc[g * Dv + i] += p[g * pstride + jj] * ld(vpool + rows[jj] * Dv, i);
}

// The G heads in tiles of up to 4 (their accumulators stay in registers).
template <class I, class KT>
inline void scores(const float* q, int64_t G, int64_t D, const KT* k, float scale, float* out, int64_t ostride) {
  for (int64_t g = 0; g < G; g += 4) {
    switch (std::min<int64_t>(4, G - g)) {
      case 4: score_tile<I, 4>(q + g * D, D, k, scale, out + g * ostride, ostride); break;
      case 3: score_tile<I, 3>(q + g * D, D, k, scale, out + g * ostride, ostride); break;
      case 2: score_tile<I, 2>(q + g * D, D, k, scale, out + g * ostride, ostride); break;
      default: score_tile<I, 1>(q + g * D, D, k, scale, out + g * ostride, ostride);
    }
  }
}

template <class I, class VT>
inline void values(float* acc, int64_t G, int64_t Dv, const float* p, int64_t pstride, const VT* vpool,
                   const int64_t* rows, int64_t nb) {
  for (int64_t g = 0; g < G; g += 4) {
    float* ag = acc + g * Dv;
    const float* pg = p + g * pstride;
    switch (std::min<int64_t>(4, G - g)) {
      case 4: value_tile<I, 4>(ag, Dv, pg, pstride, vpool, rows, nb); break;
      case 3: value_tile<I, 3>(ag, Dv, pg, pstride, vpool, rows, nb); break;
      case 2: value_tile<I, 2>(ag, Dv, pg, pstride, vpool, rows, nb); break;
      default: value_tile<I, 1>(ag, Dv, pg, pstride, vpool, rows, nb);
    }
  }
}

template <class T>
inline void prefetch_row(const T* p, int64_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t off = 0; off < n * static_cast<int64_t>(sizeof(T)); off += 64) __builtin_prefetch(c + off);
}

// A block's next rows as runs of whole pages' rows in address order, prefetched a few lines at a time while the
// current block computes (one sequential stream a pool; a burst of prefetches at a block's start stalls the core on
// its miss buffers). Runs: up to one a key of each pool in a block of kKeyBlock.
struct RunPrefetch {
  const char* p[2 * kKeyBlock + 2];
  int64_t len[2 * kKeyBlock + 2];
  int n = 0, r = 0;
  int64_t off = 0, left = 0;
  void reset() { n = r = 0, off = left = 0; }
  void add(const char* q, int64_t bytes) {  // extends the last run where q continues it
    if (n && p[n - 1] + len[n - 1] == q)
      len[n - 1] += bytes;
    else
      p[n] = q, len[n] = bytes, ++n;
    left += (bytes + 63) / 64;
  }
  void step(int64_t lines) {
    for (; lines > 0 && r < n; --lines, --left) {
      __builtin_prefetch(p[r] + off);
      if ((off += 64) >= len[r]) ++r, off = 0;
    }
  }
};

// First pool rows (page row times K) of keys j0 .. j0 + n - 1 of a sequence (table: its page table); past n, up
// to blk (<= kKeyBlock), the first key's again. Returns n = min(blk, hi - j0).
inline int64_t block_rows(const DecodeAttn& a, const int64_t* table, int64_t j0, int64_t hi, int64_t* tok,
                          int64_t blk = kKeyBlock) {
  const int64_t nb = std::min<int64_t>(blk, hi - j0);
  for (int64_t jj = 0, pg = j0 / a.S, off = j0 % a.S; jj < nb; ++jj) {
    tok[jj] = (table[pg] * a.S + off) * a.K;
    if (++off == a.S) off = 0, ++pg;
  }
  for (int64_t jj = nb; jj < blk; ++jj) tok[jj] = tok[0];
  return nb;
}

// Queues the rows of every KV head of keys tok[0 .. nb) in both pools (element size E) on pf.
template <class E>
inline void queue_block(const DecodeAttn& a, const int64_t* tok, int64_t nb, RunPrefetch& pf) {
  const char* kp = static_cast<const char*>(a.k);
  const char* vp = static_cast<const char*>(a.v);
  const int64_t e = static_cast<int64_t>(sizeof(E));
  for (int64_t jj = 0; jj < nb; ++jj) pf.add(kp + tok[jj] * a.D * e, a.K * a.D * e);
  for (int64_t jj = 0; jj < nb; ++jj) pf.add(vp + tok[jj] * a.Dv * e, a.K * a.Dv * e);
}

// One block of one KV head: keys with pool rows rows[0 .. nb), the head's G queries qf [G, D] (fp32), its part
// [G, Dv] acc, [G] m, [G] l (attn_decode.h). pf.step(step) once a key and once before the values.
template <class I, class KT>
inline void head_block(const DecodeAttn& a, const float* qf, const int64_t* rows, int64_t nb, float* part,
                       RunPrefetch& pf, int64_t step) {
  const int64_t G = a.N / a.K, D = a.D, Dv = a.Dv;
  const KT* kpool = static_cast<const KT*>(a.k);
  const KT* vpool = static_cast<const KT*>(a.v);
  thread_local FloatBuf buf;
  float* s = buf.get(G * kKeyBlock);  // [G, kKeyBlock] scores, then weights, of the block
  float* acc = part;                  // [G, Dv] running sum of p v
  float* m = acc + G * Dv;            // [G] running max score
  float* l = m + G;                   // [G] running sum of weights
  for (int64_t jj = 0; jj < nb; ++jj) {
    pf.step(step);
    scores<I>(qf, G, D, kpool + rows[jj] * D, a.scale, s + jj, kKeyBlock);
  }
  for (int64_t g = 0; g < G; ++g) {
    float* sg = s + g * kKeyBlock;
    const int64_t nv = nb / I::L * I::L;  // whole vectors; the rest in scalars
    typename I::V vm = I::bcast(-std::numeric_limits<float>::infinity());
    for (int64_t jj = 0; jj < nv; jj += I::L) vm = I::max(vm, I::load(sg + jj));
    float bm = I::hmax(vm);
    for (int64_t jj = nv; jj < nb; ++jj) bm = std::max(bm, sg[jj]);
    const float mn = std::max(m[g], bm);
    const float c = exp_neg(m[g] - mn);  // 0 on the first block (m = -inf)
    m[g] = mn;
    const typename I::V vmn = I::bcast(mn);
    typename I::V vs = I::zero();
    for (int64_t jj = 0; jj < nv; jj += I::L) {
      const typename I::V e = exp_neg_v<I>(I::sub(I::load(sg + jj), vmn));
      I::store(sg + jj, e);
      vs = I::add(vs, e);
    }
    float sum = I::hsum(vs);
    for (int64_t jj = nv; jj < nb; ++jj) {
      sg[jj] = exp_neg(sg[jj] - mn);
      sum += sg[jj];
    }
    l[g] = l[g] * c + sum;
    if (c != 1.f) {
      const typename I::V cv = I::bcast(c);
      int64_t d = 0;
      for (; d + I::L <= Dv; d += I::L) I::store(acc + g * Dv + d, I::mul(cv, I::load(acc + g * Dv + d)));
      for (; d < Dv; ++d) acc[g * Dv + d] *= c;
    }
  }
  pf.step(step);
  values<I>(acc, G, Dv, s, kKeyBlock, vpool, rows, nb);
}

// The span task (attn_decode.h's AttnSpanFn): keys lo .. hi - 1 of sequence b for every KV head, block by block
// (a page holds all heads' rows of its tokens, so a block's rows of all heads are whole runs of its pages, where
// one head's rows alone, a D-row every K, read at under half the bandwidth), the next block queued on pf.
template <class I, class KT>
void attn_span_impl(const DecodeAttn& a, int64_t b, int64_t lo, int64_t hi, float* parts, int64_t head_stride) {
  const int64_t G = a.N / a.K, D = a.D, Dv = a.Dv, K = a.K;
  const int64_t* table = a.page_table + b * a.pmax;
  thread_local FloatBuf qbuf;
  float* qf = qbuf.get(a.N * D);  // [N, D] q, fp32
  for (int64_t i = 0; i < a.N * D; ++i)
    qf[i] = a.q_bf16 ? ld(static_cast<const uint16_t*>(a.q) + b * a.N * D, i)
                     : static_cast<const float*>(a.q)[b * a.N * D + i];
  for (int64_t kh = 0; kh < K; ++kh) {
    float* part = parts + kh * head_stride;
    std::fill(part, part + G * Dv, 0.f);
    std::fill(part + G * Dv, part + G * Dv + G, -std::numeric_limits<float>::infinity());
    std::fill(part + G * Dv + G, part + G * Dv + 2 * G, 0.f);
  }
  int64_t tok[2][kKeyBlock], rows[kKeyBlock];
  RunPrefetch pf;
  int cur = 0;
  block_rows(a, table, lo, hi, tok[0]);
  for (int64_t j0 = lo; j0 < hi; j0 += kKeyBlock) {
    const int64_t nb = std::min<int64_t>(kKeyBlock, hi - j0);
    pf.reset();
    if (j0 + kKeyBlock < hi) queue_block<KT>(a, tok[cur ^ 1], block_rows(a, table, j0 + kKeyBlock, hi, tok[cur ^ 1]), pf);
    const int64_t step = (pf.left + K * (nb + 1) - 1) / (K * (nb + 1));
    for (int64_t kh = 0; kh < K; ++kh) {
      for (int64_t jj = 0; jj < nb; ++jj) rows[jj] = tok[cur][jj] + kh;
      head_block<I, KT>(a, qf + kh * G * D, rows, nb, parts + kh * head_stride, pf, step);
    }
    pf.step(pf.left);
    cur ^= 1;
  }
}

}  // namespace

// Defines the span task NAME (cpu/attn_decode.h's AttnSpanFn) over traits TRAITS, for bf16 or fp32 pools.
#define FT_ATTN_SPAN(NAME, TRAITS)                                                                                \
  void NAME(const DecodeAttn& a, int64_t b, int64_t lo, int64_t hi, float* parts, int64_t head_stride) {        \
    if (a.kv_bf16)                                                                                                \
      attn_span_impl<TRAITS, uint16_t>(a, b, lo, hi, parts, head_stride);                                         \
    else                                                                                                          \
      attn_span_impl<TRAITS, float>(a, b, lo, hi, parts, head_stride);                                           \
  }

}  // namespace ft
