// Prefill attention (cpu/attn_prefill.h) on AVX-512 BF16: a task's rows sit in the 16 lanes of a zmm (lane
// groups), so the online softmax is vertical (no horizontal sums or maxima). Per block of kPrefillKeyBlock keys,
// shared by the task's lane groups:
//   keys   copied from their pages and transposed to [D / 2][block] column pairs: a score tile is then 16 keys
//          x 16 rows, vdpbf16ps of the rows' q pairs (q transposed once a task) with one key's pair broadcast;
//   values of two consecutive keys interleaved a bf16 pair per column: a value tile is 16 columns x 16 rows,
//          vdpbf16ps of the rows' weight pairs (two keys' weights rounded to bf16) with a column's pair
//          broadcast, into the rows' fp32 sums held as [Dv][16 lanes].
// Same blocking and rounding as the scalar ground truth (arch/scalar_attn_prefill.cpp); exp by exp_neg_v.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "cpu/arch/attn_common.h"  // exp_neg_v, FloatBuf
#include "cpu/arch/x86_avx512_attn.h"
#include "cpu/attn_prefill.h"

namespace ft {
namespace {

constexpr int64_t KB = kPrefillKeyBlock, GL = kPrefillGroup;
static_assert(KB == 32 && GL == 16, "the tiles below are written for 32-key blocks and 16-lane groups");

// In place: row i of the 16 x 16 dwords r becomes column i.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

// Two keys' weights of 16 rows as one bf16 pair a lane (round to nearest even): lane r = (w0[r], w1[r]).
inline __m512i weight_pairs(__m512 w0, __m512 w1) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(w1, w0));
}

inline __m512 dp(__m512 acc, __m512i a, int32_t pair) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)_mm512_set1_epi32(pair));
}

}  // namespace

void attn_prefill_avx512bf16(const PrefillAttn& a, const PrefillTask& t) {
  using I = Avx512Attn;
  const int64_t G = a.N / a.K, D2 = a.D / 2, Dv = a.Dv, rows = (t.i1 - t.i0) * G;
  const int64_t ng = (rows + GL - 1) / GL, D2p = (D2 + 15) / 16 * 16;
  const int64_t* table = a.page_table + t.b * a.pmax;
  const int64_t lo = prefill_first_key(a, prefill_qpos(a, t.b, t.i0)), hi = prefill_qpos(a, t.b, t.i1 - 1) + 1;
  const float kInf = std::numeric_limits<float>::infinity();

  // Buffers (one thread's, grow-only): q pairs [ng][D2][16], value sums [ng][Dv][16], m and l [ng][16], the
  // block's key pairs [D2p][KB] and value pairs [KB / 2][Dv], scores [KB][16], weight pairs [KB / 2][16].
  thread_local FloatBuf buf;
  float* base = buf.get(ng * GL * (D2 + Dv + 2) + D2p * KB + KB / 2 * Dv + KB * GL + KB / 2 * GL);
  int32_t* qt = reinterpret_cast<int32_t*>(base);
  float* ot = base + ng * GL * D2;
  float* mv = ot + ng * GL * Dv;
  float* lv = mv + ng * GL;
  int32_t* kt = reinterpret_cast<int32_t*>(lv + ng * GL);
  int32_t* vp = kt + D2p * KB;
  float* sc = reinterpret_cast<float*>(vp + KB / 2 * Dv);
  int32_t* wp = reinterpret_cast<int32_t*>(sc + KB * GL);

  // Per group: each lane's query position and first visible key (padding lanes repeat the last row), the
  // group's visible key range, q pairs transposed, m = -inf, l = 0, sums 0.
  struct Group { __m512i pos, first; int64_t lo, hi, min_pos, max_first; };
  thread_local std::vector<Group> groups;
  if (static_cast<int64_t>(groups.size()) < ng) groups.resize(ng);
  Group* grp = groups.data();
  for (int64_t g = 0; g < ng; ++g) {
    alignas(64) int32_t pos[GL], first[GL];
    Group& gr = grp[g];
    gr.lo = hi, gr.hi = 0, gr.min_pos = hi, gr.max_first = 0;
    for (int64_t r = 0; r < GL; ++r) {
      const int64_t row = std::min(g * GL + r, rows - 1), i = t.i0 + row / G, n = t.kh * G + row % G;
      const int64_t p = prefill_qpos(a, t.b, i), f = prefill_first_key(a, p);
      pos[r] = static_cast<int32_t>(p), first[r] = static_cast<int32_t>(f);
      gr.lo = std::min(gr.lo, f), gr.hi = std::max(gr.hi, p + 1);
      gr.min_pos = std::min(gr.min_pos, p), gr.max_first = std::max(gr.max_first, f);
      const int32_t* q = reinterpret_cast<const int32_t*>(a.q + ((t.t0 + i) * a.N + n) * a.D);
      for (int64_t d = 0; d < D2; ++d) qt[(g * D2 + d) * GL + r] = q[d];
    }
    gr.pos = _mm512_load_si512(pos), gr.first = _mm512_load_si512(first);
    _mm512_storeu_ps(mv + g * GL, _mm512_set1_ps(-kInf));
    _mm512_storeu_ps(lv + g * GL, _mm512_setzero_ps());
    std::fill(ot + g * Dv * GL, ot + (g + 1) * Dv * GL, 0.f);
  }

  const __m512i zero = _mm512_setzero_si512();
  // Pool rows (head kh) of a block's keys, each found once: the next block's while this one's are fetched.
  const auto block_rows = [&](int64_t j0, int64_t* out, bool fetch) {
    for (int64_t j = j0; j < std::min(hi, j0 + KB); ++j) {
      const int64_t row = (table[j / a.S] * a.S + j % a.S) * a.K + t.kh;
      out[j - j0] = row;
      if (fetch) prefetch_row(a.k + row * a.D, a.D), prefetch_row(a.v + row * Dv, Dv);
    }
  };
  int64_t kv_rows[2][KB];
  int64_t *cur = kv_rows[0], *next = kv_rows[1];
  block_rows(lo, cur, false);
  for (int64_t j0 = lo; j0 < hi; j0 += KB, std::swap(cur, next)) {
    const int64_t nb = std::min(KB, hi - j0), nh = nb > GL ? 2 : 1, npair = (nb + 1) / 2;
    block_rows(j0 + KB, next, true);  // fetched while this block computes
    // Keys: rows into [D2p][KB] pairs, 16 keys x 16 pairs a transpose (rows past nb and pairs past D2 zero).
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t d0 = 0; d0 < D2p; d0 += 16) {
        __m512i r[16];
        const __mmask16 m = D2 - d0 >= 16 ? __mmask16(0xffff) : __mmask16((1u << (D2 - d0)) - 1);
        for (int64_t jj = 0; jj < 16; ++jj) {
          const int64_t j = h * 16 + jj;
          r[jj] = j < nb ? _mm512_maskz_loadu_epi32(m, a.k + cur[j] * a.D + 2 * d0) : zero;
        }
        transpose16(r);
        for (int64_t d = 0; d < 16; ++d) _mm512_storeu_si512(kt + (d0 + d) * KB + h * 16, r[d]);
      }
    // Values: keys 2p and 2p + 1 interleaved a bf16 pair per column (the odd last key with a zero row).
    for (int64_t p = 0; p < npair; ++p) {
      const uint16_t* v0 = a.v + cur[2 * p] * Dv;
      const uint16_t* v1 = 2 * p + 1 < nb ? a.v + cur[2 * p + 1] * Dv : nullptr;
      int32_t* dst = vp + p * Dv;
      int64_t c = 0;
      for (; c + 32 <= Dv; c += 32) {
        const __m512i x = _mm512_loadu_si512(v0 + c), y = v1 ? _mm512_loadu_si512(v1 + c) : zero;
        const __m512i lo16 = _mm512_unpacklo_epi16(x, y), hi16 = _mm512_unpackhi_epi16(x, y);
        _mm512_storeu_si512(dst + c, _mm512_permutex2var_epi32(lo16, _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0), hi16));
        _mm512_storeu_si512(dst + c + 16, _mm512_permutex2var_epi32(lo16, _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8), hi16));
      }
      for (; c < Dv; ++c) dst[c] = int32_t(uint32_t(v0[c]) | (v1 ? uint32_t(v1[c]) << 16 : 0u));
    }

    for (int64_t g = 0; g < ng; ++g) {
      const Group& gr = grp[g];
      if (j0 >= gr.hi || j0 + nb <= gr.lo) continue;
      // Scores: 16 keys x 16 rows a tile.
      const int32_t* q = qt + g * D2 * GL;
      for (int64_t h = 0; h < nh; ++h) {
        __m512 s[16];
        for (int jj = 0; jj < 16; ++jj) s[jj] = _mm512_setzero_ps();
        const int32_t* k = kt + h * 16;
        for (int64_t d = 0; d < D2; ++d) {
          const __m512i qv = _mm512_loadu_si512(q + d * GL);
          for (int jj = 0; jj < 16; ++jj) s[jj] = dp(s[jj], qv, k[d * KB + jj]);
        }
        for (int jj = 0; jj < 16; ++jj) _mm512_storeu_ps(sc + (h * 16 + jj) * GL, _mm512_mul_ps(s[jj], _mm512_set1_ps(a.scale)));
      }
      // Keys a lane does not see (causal, window, past the block) score -inf.
      const int64_t nk = nh * 16;
      if (!(j0 + nb - 1 <= gr.min_pos && j0 >= gr.max_first && nb == nk)) {
        for (int64_t jj = 0; jj < nk; ++jj) {
          const __m512i kp = _mm512_set1_epi32(static_cast<int32_t>(j0 + jj));
          __mmask16 vis = _mm512_cmple_epi32_mask(kp, gr.pos) & _mm512_cmpge_epi32_mask(kp, gr.first);
          if (jj >= nb) vis = 0;
          _mm512_storeu_ps(sc + jj * GL, _mm512_mask_mov_ps(_mm512_set1_ps(-kInf), vis, _mm512_loadu_ps(sc + jj * GL)));
        }
      }
      // Online softmax, vertical: new max, rescale, weights as bf16 pairs, their sum.
      __m512 mx = _mm512_set1_ps(-kInf);
      for (int64_t jj = 0; jj < nk; ++jj) mx = _mm512_max_ps(mx, _mm512_loadu_ps(sc + jj * GL));
      const __m512 mold = _mm512_loadu_ps(mv + g * GL), mnew = _mm512_max_ps(mold, mx);
      const __m512 msafe = _mm512_mask_mov_ps(mnew, _mm512_cmp_ps_mask(mnew, _mm512_set1_ps(-kInf), _CMP_EQ_OQ), _mm512_setzero_ps());
      const __m512 alpha = exp_neg_v<I>(_mm512_sub_ps(mold, msafe));
      __m512 lsum = _mm512_setzero_ps();
      const int64_t np = nk / 2;
      for (int64_t p = 0; p < np; ++p) {
        const __m512 w0 = exp_neg_v<I>(_mm512_sub_ps(_mm512_loadu_ps(sc + 2 * p * GL), msafe));
        const __m512 w1 = exp_neg_v<I>(_mm512_sub_ps(_mm512_loadu_ps(sc + (2 * p + 1) * GL), msafe));
        const __m512i w = weight_pairs(w0, w1);
        _mm512_storeu_si512(wp + p * GL, w);
        lsum = _mm512_add_ps(lsum, _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)),
                                                 _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(int32_t(0xffff0000u))))));
      }
      _mm512_storeu_ps(mv + g * GL, mnew);
      _mm512_storeu_ps(lv + g * GL, _mm512_fmadd_ps(_mm512_loadu_ps(lv + g * GL), alpha, lsum));
      // Value sums: 16 columns x 16 rows a tile, over the block's key pairs (pairs past the block are zero).
      const int64_t npv = std::min(np, npair);
      float* o = ot + g * Dv * GL;
      int64_t c = 0;
      for (; c + 16 <= Dv; c += 16) {
        __m512 acc[16];
        for (int i = 0; i < 16; ++i) acc[i] = _mm512_mul_ps(_mm512_loadu_ps(o + (c + i) * GL), alpha);
        for (int64_t p = 0; p < npv; ++p) {
          const __m512i w = _mm512_loadu_si512(wp + p * GL);
          const int32_t* v = vp + p * Dv + c;
          for (int i = 0; i < 16; ++i) acc[i] = dp(acc[i], w, v[i]);
        }
        for (int i = 0; i < 16; ++i) _mm512_storeu_ps(o + (c + i) * GL, acc[i]);
      }
      for (; c < Dv; ++c) {
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(o + c * GL), alpha);
        for (int64_t p = 0; p < npv; ++p) acc = dp(acc, _mm512_loadu_si512(wp + p * GL), vp[p * Dv + c]);
        _mm512_storeu_ps(o + c * GL, acc);
      }
    }
  }

  // Out: sums / (l + the sink's term), each real row's lane.
  for (int64_t g = 0; g < ng; ++g) {
    for (int64_t r = 0; r < GL && g * GL + r < rows; ++r) {
      const int64_t row = g * GL + r, i = t.i0 + row / G, n = t.kh * G + row % G;
      float l = lv[g * GL + r];
      if (a.sinks) l += std::exp(a.sinks[n] - mv[g * GL + r]);
      const float inv = 1.f / l;
      float* out = a.o + ((t.t0 + i) * a.N + n) * Dv;
      const float* o = ot + g * Dv * GL + r;
      for (int64_t c = 0; c < Dv; ++c) out[c] = o[c * GL] * inv;
    }
  }
}

}  // namespace ft
