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
  static V exp_neg(V x) {  // attn_common.h's exp_neg on 8 lanes (the same steps and constants)
    const __m256 lim = _mm256_set1_ps(-87.f);
    const __m256 keep = _mm256_cmp_ps(x, lim, _CMP_GE_OQ);
    const __m256 xc = _mm256_max_ps(x, lim);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f), r);
    __m256 p = _mm256_set1_ps(1.f / 5040.f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(keep, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
};
}  // namespace

void attn_span_avx2(const DecodeAttn& a, int64_t b, int64_t kh, int64_t lo, int64_t hi, float* part) {
  if (a.kv_bf16)
    attn_span_impl<Avx2Attn, uint16_t>(a, b, kh, lo, hi, part);
  else
    attn_span_impl<Avx2Attn, float>(a, b, kh, lo, hi, part);
}

}  // namespace ft
