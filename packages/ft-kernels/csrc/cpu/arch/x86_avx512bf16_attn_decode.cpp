// Decode attention (cpu/attn_decode.h's span task) on AVX-512 BF16, for bf16 q and pools with G = N / K of 1, 2, 4,
// 8 or 16 and key / value widths in 32s (the shapes attn_decode_bf16_takes admits; others keep the fp32 span of
// attn_common.h). The fp32 span widens every key and value element and multiplies in fp32 with a horizontal sum
// per (key, head): ~150 cycles per key and KV head at G = 8 on Zen 5, a fifth of one core's read bandwidth. Here
// both products are `vdpbf16ps`, 32 bf16 pairs an instruction, per block of kBlock keys, each KV head in turn:
//   scores  a key row's 32-column chunk against the G heads' q chunks (q as stored, bf16): 16 accumulators are
//           16 / G keys x G heads, closed by one 16 x 16 transposing sum into [key][head] (exact bf16 products,
//           fp32 sums);
//   softmax vertical over [key][head] vectors (each lane one head, the 16 / G keys of a vector folded by lane
//           rotations), exp by exp_neg_v; the weights rounded to bf16 (as a bf16 flash kernel does), and the
//           running denominator sums the rounded weights;
//   values  two keys' value chunks interleaved a bf16 pair per column (unpacklo / unpackhi), vdpbf16ps with each
//           head's pair of weights broadcast, into fp32 sums kept in the interleave's column order and put back in
//           order once a span.
// The arithmetic and its bound are the prefill kernel's (attn_prefill.h; fp32_bounds.prefill_attention_bound's
// weight and flush terms). The next block's page runs (keys and values of every head) are prefetched a few lines
// at a time while a block computes (attn_common.h's RunPrefetch).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "cpu/arch/attn_common.h"  // exp_neg_v, FloatBuf
#include "cpu/arch/x86_avx512_attn.h"
#include "cpu/arch/x86_avx512bf16.h"  // hsum16x16
#include "cpu/attn_decode.h"

namespace ft {

namespace {

constexpr int kBlock = 32;  // keys a block: 2G score vectors, 16 key pairs for the values

inline __m512 dpbf(__m512 acc, __m512i a, __m512i b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }

// Folds the 16 / G lanes of each head (lanes of period G) together: every lane then holds its head's max / sum.
template <int G>
inline __m512 fold_max(__m512 v) {
  FT_UNROLL for (int w = 8; w >= G; w /= 2) v = _mm512_max_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), _mm512_castps_si512(v), w)));
  return v;
}
template <int G>
inline __m512 fold_add(__m512 v) {
  FT_UNROLL for (int w = 8; w >= G; w /= 2) v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v), _mm512_castps_si512(v), w)));
  return v;
}

// Keys j0 .. j0 + nb - 1 (nb <= kBlock) of one KV head: tok[jj] is key j0 + jj's first pool row (its page row
// times K; past nb, the block's first key's), the head's row tok[jj] + kh. M, Lsum: the head's running max and
// denominator (lane i: head i % G); acc: its [G, Dv] sums in the value tiles' column order.
template <int G>
inline void bf16_block(const DecodeAttn& a, const uint16_t* q, const int64_t* tok, int64_t kh, int64_t nb, __m512& M,
                       __m512& Lsum, float* acc, RunPrefetch& pf, int64_t pf_step) {
  constexpr int NK = 16 / G;         // keys a score vector
  constexpr int NV = kBlock / NK;    // score vectors a block
  constexpr int GT = G < 8 ? G : 8;  // heads a value tile (2 GT accumulators)
  const int64_t D = a.D, Dv = a.Dv;
  const uint16_t* kpool = static_cast<const uint16_t*>(a.k);
  const uint16_t* vpool = static_cast<const uint16_t*>(a.v);
  alignas(64) float s[kBlock * G];          // [key][head] scores of the block
  alignas(64) uint16_t e16[kBlock * G];     // [key][head] weights in bf16
  alignas(64) uint32_t pw[kBlock / 2 * G];  // [key pair][head] weight pairs
  alignas(64) float cf[16];
  int64_t r[kBlock];
  FT_UNROLL for (int j = 0; j < kBlock; ++j) r[j] = tok[j] + kh;
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity()), scale = _mm512_set1_ps(a.scale);
  // scores: vector m holds keys m NK .. m NK + NK - 1, heads in order within each key
  for (int m = 0; m < NV; ++m) {
    pf.step(pf_step);
    __m512 ac[16];
    FT_UNROLL for (int i = 0; i < 16; ++i) ac[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < D; c += 32) {
      __m512i kv[NK];
      FT_UNROLL for (int k = 0; k < NK; ++k) kv[k] = _mm512_loadu_si512(kpool + r[m * NK + k] * D + c);
      FT_UNROLL for (int g = 0; g < G; ++g) {
        const __m512i qv = _mm512_loadu_si512(q + g * D + c);
        FT_UNROLL for (int k = 0; k < NK; ++k) ac[k * G + g] = dpbf(ac[k * G + g], kv[k], qv);
      }
    }
    __m512 sv = _mm512_mul_ps(hsum16x16(ac), scale);
    const int valid = static_cast<int>(std::min<int64_t>(NK, std::max<int64_t>(0, nb - m * NK)));  // keys < nb
    if (valid < NK) sv = _mm512_mask_mov_ps(ninf, static_cast<__mmask16>((1u << (valid * G)) - 1), sv);
    _mm512_store_ps(s + 16 * m, sv);
  }
  // online softmax, vertical: lane i of every vector is head i % G
  __m512 bm = ninf;
  FT_UNROLL for (int m = 0; m < NV; ++m) bm = _mm512_max_ps(bm, _mm512_load_ps(s + 16 * m));
  const __m512 Mn = _mm512_max_ps(M, fold_max<G>(bm));
  const __m512 c = exp_neg_v<Avx512Attn>(_mm512_sub_ps(M, Mn));  // 0 on the first block (M = -inf)
  M = Mn;
  __m512 ls = _mm512_setzero_ps();
  for (int m = 0; m < NV; ++m) {
    const __m512 e = exp_neg_v<Avx512Attn>(_mm512_sub_ps(_mm512_load_ps(s + 16 * m), M));
    const __m256i eb = (__m256i)_mm512_cvtneps_pbh(e);  // round to nearest even
    _mm256_store_si256(reinterpret_cast<__m256i*>(e16 + 16 * m), eb);
    ls = _mm512_add_ps(ls, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(eb), 16)));  // exact
  }
  Lsum = _mm512_fmadd_ps(Lsum, c, fold_add<G>(ls));
  _mm512_store_ps(cf, c);
  for (int g = 0; g < G; ++g)
    if (cf[g] != 1.f) {
      const __m512 cv = _mm512_set1_ps(cf[g]);
      for (int64_t d = 0; d < Dv; d += 16) _mm512_storeu_ps(acc + g * Dv + d, _mm512_mul_ps(cv, _mm512_loadu_ps(acc + g * Dv + d)));
    }
  const int np = static_cast<int>((nb + 1) / 2);  // key pairs (an odd block's last pair: a weight of 0)
  for (int p = 0; p < np; ++p)
    FT_UNROLL for (int g = 0; g < G; ++g) pw[p * G + g] = e16[2 * p * G + g] | static_cast<uint32_t>(e16[(2 * p + 1) * G + g]) << 16;
  // values: columns c0 .. c0 + 31 of two keys interleaved: lo = columns c0 + 8L + 0..3, hi = c0 + 8L + 4..7 (lane L)
  for (int64_t c0 = 0; c0 < Dv; c0 += 32)
    for (int g0 = 0; g0 < G; g0 += GT) {
      pf.step(pf_step);
      __m512 a0[GT], a1[GT];
      FT_UNROLL for (int t = 0; t < GT; ++t) {
        a0[t] = _mm512_loadu_ps(acc + (g0 + t) * Dv + c0);
        a1[t] = _mm512_loadu_ps(acc + (g0 + t) * Dv + c0 + 16);
      }
      for (int p = 0; p < np; ++p) {
        const __m512i v0 = _mm512_loadu_si512(vpool + r[2 * p] * Dv + c0);
        const __m512i v1 = _mm512_loadu_si512(vpool + r[2 * p + 1] * Dv + c0);
        const __m512i vl = _mm512_unpacklo_epi16(v0, v1), vh = _mm512_unpackhi_epi16(v0, v1);
        FT_UNROLL for (int t = 0; t < GT; ++t) {
          const __m512i w = _mm512_set1_epi32(static_cast<int>(pw[p * G + g0 + t]));
          a0[t] = dpbf(a0[t], vl, w);
          a1[t] = dpbf(a1[t], vh, w);
        }
      }
      FT_UNROLL for (int t = 0; t < GT; ++t) {
        _mm512_storeu_ps(acc + (g0 + t) * Dv + c0, a0[t]);
        _mm512_storeu_ps(acc + (g0 + t) * Dv + c0 + 16, a1[t]);
      }
    }
}

// Keys lo .. hi - 1 of sequence b for every KV head, block by block: a block's rows of all heads are whole runs
// of its pages ([S, K, D] each), where one head's rows alone (a D-row every K) read at under half the bandwidth.
template <int G>
void seq_span(const DecodeAttn& a, int64_t b, int64_t lo, int64_t hi, float* parts, int64_t head_stride) {
  const int64_t K = a.K, D = a.D, Dv = a.Dv;
  const int64_t* table = a.page_table + b * a.pmax;
  const uint16_t* q = static_cast<const uint16_t*>(a.q) + b * a.N * D;  // [N, D]
  alignas(64) __m512 M[kMaxHeads], Lsum[kMaxHeads];
  for (int64_t kh = 0; kh < K; ++kh) {
    std::fill(parts + kh * head_stride, parts + kh * head_stride + G * Dv, 0.f);
    M[kh] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    Lsum[kh] = _mm512_setzero_ps();
  }
  // call sites of pf.step in a block: per head, the score vectors and the value tiles
  const int64_t sites = K * (kBlock / (16 / G) + Dv / 32 * ((G + 7) / 8));
  int64_t tok[2][kBlock];
  RunPrefetch pf;
  int cur = 0;
  block_rows(a, table, lo, hi, tok[0], kBlock);
  for (int64_t j0 = lo; j0 < hi; j0 += kBlock) {
    const int64_t nb = std::min<int64_t>(kBlock, hi - j0);
    pf.reset();
    if (j0 + kBlock < hi) queue_block<uint16_t>(a, tok[cur ^ 1], block_rows(a, table, j0 + kBlock, hi, tok[cur ^ 1], kBlock), pf);
    const int64_t step = (pf.left + sites - 1) / sites;
    for (int64_t kh = 0; kh < K; ++kh)
      bf16_block<G>(a, q + kh * G * D, tok[cur], kh, nb, M[kh], Lsum[kh], parts + kh * head_stride, pf, step);
    pf.step(pf.left);
    cur ^= 1;
  }
  // columns back in order: natural column 8L + i of a chunk is lo lane 4L + i (i < 4) or hi lane 4L + i - 4
  const __m512i i0 = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
  const __m512i i1 = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
  for (int64_t kh = 0; kh < K; ++kh) {
    float* part = parts + kh * head_stride;
    for (int64_t g = 0; g < G; ++g)
      for (int64_t c0 = 0; c0 < Dv; c0 += 32) {
        const __m512 x0 = _mm512_loadu_ps(part + g * Dv + c0), x1 = _mm512_loadu_ps(part + g * Dv + c0 + 16);
        _mm512_storeu_ps(part + g * Dv + c0, _mm512_permutex2var_ps(x0, i0, x1));
        _mm512_storeu_ps(part + g * Dv + c0 + 16, _mm512_permutex2var_ps(x0, i1, x1));
      }
    alignas(64) float mv[16], lv[16];
    _mm512_store_ps(mv, M[kh]);
    _mm512_store_ps(lv, Lsum[kh]);
    for (int g = 0; g < G; ++g) part[G * Dv + g] = mv[g], part[G * Dv + G + g] = lv[g];
  }
}

}  // namespace

bool attn_decode_bf16_shapes(int64_t G, int64_t D, int64_t Dv) {
  return (G == 1 || G == 2 || G == 4 || G == 8 || G == 16) && D > 0 && D % 32 == 0 && Dv > 0 && Dv % 32 == 0;
}

void attn_span_avx512bf16(const DecodeAttn& a, int64_t b, int64_t lo, int64_t hi, float* parts, int64_t head_stride) {
  switch (a.N / a.K) {
    case 1: return seq_span<1>(a, b, lo, hi, parts, head_stride);
    case 2: return seq_span<2>(a, b, lo, hi, parts, head_stride);
    case 4: return seq_span<4>(a, b, lo, hi, parts, head_stride);
    case 8: return seq_span<8>(a, b, lo, hi, parts, head_stride);
    default: return seq_span<16>(a, b, lo, hi, parts, head_stride);
  }
}

}  // namespace ft
