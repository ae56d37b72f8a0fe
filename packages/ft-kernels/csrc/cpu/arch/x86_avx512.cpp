// AVX-512F: widen 16 bf16 weights to fp32 (zero-extend + shift, exact), FMA against fp32 x.
// Tokens are blocked by 4 so each weight vector is loaded once per 4 tokens.
#include "cpu/isa.h"
#include <immintrin.h>

namespace ft {

static inline __m512 load_bf16x16(const uint16_t* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __m512 load_bf16_tail(const uint16_t* p, int n) {
  __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <int NT>
static inline void row_block(const uint16_t* w, int64_t cols, const float* X, int64_t ldx,
                             float* out, int64_t ldy) {
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    __m512 wv = load_bf16x16(w + c);
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(X + t * ldx + c), acc[t]);
  }
  if (c < cols) {
    int n = static_cast<int>(cols - c);
    __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
    __m512 wv = load_bf16_tail(w + c, n);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, X + t * ldx + c), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t * ldy] = _mm512_reduce_add_ps(acc[t]);
}

void gemv_bf16_avx512(const uint16_t* W, int64_t rows, int64_t cols, int64_t ldw,
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
