// Decode attention (cpu/attn_decode.h) in AVX2 + FMA: the task of attn_common.h over ymm vectors.
#include "cpu/arch/attn_common.h"
#include "cpu/arch/x86_avx2.h"

namespace ft {
namespace {
struct Avx2Attn : Avx2 {
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const uint16_t* p) {  // 8 bf16 -> fp32: zero-extend to 32 bits, shift into the high half
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float hmax(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static V round(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2(V n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  static V zero_below(V x, float lim, V v) {  // v where !(x < lim), NaN included
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(lim), _CMP_NLT_UQ), v);
  }
};
}  // namespace

FT_ATTN_SPAN(attn_span_avx2, Avx2Attn)

}  // namespace ft
