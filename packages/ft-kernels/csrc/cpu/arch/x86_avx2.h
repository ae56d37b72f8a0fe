// AVX2 + FMA + F16C traits for rows_common.h (included only by x86_avx2_*.cpp, built with -mavx2 -mfma -mf16c).
#pragma once
#include <immintrin.h>

#include "cpu/arch/rows_common.h"

namespace ft {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int L = 8;
  // Rows per tile for NT tokens (index NT): 16 ymm registers hold NR*NT accumulators plus decode temporaries.
  static constexpr int kDenseNR[5] = {0, 4, 4, 2, 2};
  static constexpr int kGroupNR[5] = {0, 4, 2, 1, 1};
  static constexpr int kPairNR[5] = {0, 4, 2, 1, 1};  // paired decoders: 2 vectors per row and token
  static V zero() { return _mm256_setzero_ps(); }
  static V loadx(const float* p) { return _mm256_loadu_ps(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V bcast(float s) { return _mm256_set1_ps(s); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  // a = x0..x7, b = x8..x15 -> a = x0, x2, ..., x14; b = x1, x3, ..., x15
  static void deint(V& a, V& b) {
    const __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xdd);  // per 128-bit half
    a = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8));
    b = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xd8));
  }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

// 16 bf16 (one 256-bit load) as two exact fp32 vectors: the even elements (a shift left 16) and the odd ones (the
// low halves masked off).
inline void bf16_even_odd(__m256i v, __m256& even, __m256& odd) {
  even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// The sum of a vector's 8 int32 lanes.
inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace
}  // namespace ft
