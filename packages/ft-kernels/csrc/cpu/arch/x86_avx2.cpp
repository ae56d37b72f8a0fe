// AVX2 + FMA: widen 8 bf16 weights to fp32 (zero-extend + shift, exact), FMA against fp32 x.
// Tokens are blocked by 4 so each weight vector is loaded once per 4 tokens.
#include "cpu/isa.h"
#include <immintrin.h>

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
static inline void row_block(const uint16_t* w, int64_t cols, const float* X, int64_t ldx,
                             float* out, int64_t ldy) {
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    __m256 wv = load_bf16x8(w + c);
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(X + t * ldx + c), acc[t]);
  }
  float tail[NT];
  for (int t = 0; t < NT; ++t) tail[t] = 0.f;
  for (; c < cols; ++c) {
    uint32_t u = static_cast<uint32_t>(w[c]) << 16;
    float wf;
    __builtin_memcpy(&wf, &u, 4);
    for (int t = 0; t < NT; ++t) tail[t] += wf * X[t * ldx + c];
  }
  for (int t = 0; t < NT; ++t) out[t * ldy] = hsum(acc[t]) + tail[t];
}

void gemv_bf16_avx2(const uint16_t* W, int64_t rows, int64_t cols, int64_t ldw,
                    const float* X, int64_t ntok, int64_t ldx, float* Y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* w = W + r * ldw;
    int64_t t = 0;
    for (; t + 4 <= ntok; t += 4) row_block<4>(w, cols, X + t * ldx, ldx, Y + t * ldy + r, ldy);
    switch (ntok - t) {
      case 3: row_block<3>(w, cols, X + t * ldx, ldx, Y + t * ldy + r, ldy); break;
      case 2: row_block<2>(w, cols, X + t * ldx, ldx, Y + t * ldy + r, ldy); break;
      case 1: row_block<1>(w, cols, X + t * ldx, ldx, Y + t * ldy + r, ldy); break;
      default: break;
    }
  }
}

}  // namespace ft
