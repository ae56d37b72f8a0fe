// AVX-512 (F/BW/VL/DQ) + FMA + F16C traits for rows_common.h (included only by x86_avx512_*.cpp).
#pragma once
#include <immintrin.h>

#include "cpu/arch/rows_common.h"

namespace ft {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int L = 16;
  // Rows per tile for NT tokens (index NT): 32 zmm registers.
  static constexpr int kDenseNR[5] = {0, 8, 4, 4, 4};
  static constexpr int kGroupNR[5] = {0, 8, 4, 2, 2};
  static V zero() { return _mm512_setzero_ps(); }
  static V loadx(const float* p) { return _mm512_loadu_ps(p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V bcast(float s) { return _mm512_set1_ps(s); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // a = x0..x15, b = x16..x31 -> a = x0, x2, ..., x30; b = x1, x3, ..., x31
  static void deint(V& a, V& b) {
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    const __m512 e = _mm512_permutex2var_ps(a, ie, b);
    b = _mm512_permutex2var_ps(a, io, b);
    a = e;
  }
  static float hsum(V v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace
}  // namespace ft
