// AVX2 + FMA, BF16 weights: widen 8 bf16 to fp32 (zero-extend + shift, exact), FMA against fp32 x.
// A register tile of NR rows x NT tokens: each weight vector is loaded once per NT tokens, and the
// NR * NT accumulators are independent FMA chains (one chain alone is FMA-latency bound).
#include <immintrin.h>

#include "cpu/formats.h"

namespace ft {

static inline __m256 load_bf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Y[t * ldy + i] = dot(row i, x_t) for NR rows starting at `w` (row stride ldw elements), NT tokens.
template <int NR, int NT>
static inline void tile(const uint16_t* w, int64_t ldw, int64_t cols, const float* X, int64_t ldx, float* Y, int64_t ldy) {
  __m256 acc[NR][NT];
  for (int i = 0; i < NR; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    __m256 wv[NR];
    for (int i = 0; i < NR; ++i) wv[i] = load_bf16x8(w + i * ldw + c);
    for (int t = 0; t < NT; ++t) {
      __m256 xv = _mm256_loadu_ps(X + t * ldx + c);
      for (int i = 0; i < NR; ++i) acc[i][t] = _mm256_fmadd_ps(wv[i], xv, acc[i][t]);
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int t = 0; t < NT; ++t) {
      float s = hsum(acc[i][t]);
      for (int64_t k = c; k < cols; ++k) s += bf16_to_f32(w[i * ldw + k]) * X[t * ldx + k];
      Y[t * ldy + i] = s;
    }
}

// Rows r0..r1 for NT tokens: tiles of 4 rows (then single rows for the remainder).
template <int NR, int NT>
static void rows_tiled(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ldx, float* Y, int64_t ldy) {
  const int64_t ldw = m.q_stride / 2;
  int64_t r = r0;
  for (; r + NR <= r1; r += NR)
    tile<NR, NT>(reinterpret_cast<const uint16_t*>(m.q + r * m.q_stride), ldw, m.cols, X, ldx, Y + (r - r0), ldy);
  for (; r < r1; ++r)
    tile<1, NT>(reinterpret_cast<const uint16_t*>(m.q + r * m.q_stride), ldw, m.cols, X, ldx, Y + (r - r0), ldy);
}

void rows_bf16_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  // Token blocks outside, rows inside: a block of tokens' x stays in L1 while the task's rows
  // (<= 64, ~256 KiB) are re-read from L2 — the prefill tiling; decode has a single token block.
  int64_t t = 0;
  for (; t + 4 <= ntok; t += 4) rows_tiled<2, 4>(m, r0, r1, X + t * ldx, ldx, Y + t * ldy, ldy);
  switch (ntok - t) {
    case 3: rows_tiled<2, 3>(m, r0, r1, X + t * ldx, ldx, Y + t * ldy, ldy); break;
    case 2: rows_tiled<4, 2>(m, r0, r1, X + t * ldx, ldx, Y + t * ldy, ldy); break;
    case 1: rows_tiled<4, 1>(m, r0, r1, X + t * ldx, ldx, Y + t * ldy, ldy); break;
    default: break;
  }
}

}  // namespace ft
