// AVX2 + FMA, BF16 weights: widen 8 bf16 to fp32 (zero-extend + shift, exact), FMA against fp32 x.
// Tokens are blocked by 4 so each weight vector is loaded once per 4 tokens.
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

template <int NT>
static inline void row_block(const uint16_t* w, int64_t cols, const float* X, int64_t ldx, float* out, int64_t ldy) {
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    __m256 wv = load_bf16x8(w + c);
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(X + t * ldx + c), acc[t]);
  }
  float tail[NT] = {};
  for (; c < cols; ++c) {
    float wf = bf16_to_f32(w[c]);
    for (int t = 0; t < NT; ++t) tail[t] += wf * X[t * ldx + c];
  }
  for (int t = 0; t < NT; ++t) out[t * ldy] = hsum(acc[t]) + tail[t];
}

void rows_bf16_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  // Token blocks outside, rows inside: a block of 4 tokens' x stays in L1 while the task's rows
  // (<= 64, ~256 KiB) are re-read from L2 — the prefill tiling; decode has a single token block.
  auto row = [&](int64_t r) { return reinterpret_cast<const uint16_t*>(m.q + r * m.q_stride); };
  int64_t t = 0;
  for (; t + 4 <= ntok; t += 4)
    for (int64_t r = r0; r < r1; ++r) row_block<4>(row(r), m.cols, X + t * ldx, ldx, Y + t * ldy + (r - r0), ldy);
  for (int64_t r = r0; r < r1; ++r) {
    float* y = Y + t * ldy + (r - r0);
    const float* x = X + t * ldx;
    switch (ntok - t) {
      case 3: row_block<3>(row(r), m.cols, x, ldx, y, ldy); break;
      case 2: row_block<2>(row(r), m.cols, x, ldx, y, ldy); break;
      case 1: row_block<1>(row(r), m.cols, x, ldx, y, ldy); break;
      default: break;
    }
  }
}

}  // namespace ft
