// Decode attention (cpu/attn_decode.h) in AVX-512: the task of attn_common.h over zmm vectors.
#include "cpu/arch/attn_common.h"
#include "cpu/arch/x86_avx512.h"

namespace ft {
namespace {
struct Avx512Attn : Avx512 {
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const uint16_t* p) {  // 16 bf16 -> fp32: zero-extend to 32 bits, shift into the high half
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }
  static V exp_neg(V x) {  // attn_common.h's exp_neg on 16 lanes (the same steps and constants)
    const __m512 lim = _mm512_set1_ps(-87.f);
    const __mmask16 keep = _mm512_cmp_ps_mask(x, lim, _CMP_GE_OQ);
    const __m512 xc = _mm512_max_ps(x, lim);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
    __m512 p = _mm512_set1_ps(1.f / 5040.f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
  }
};
}  // namespace

void attn_span_avx512(const DecodeAttn& a, int64_t b, int64_t kh, int64_t lo, int64_t hi, float* part) {
  if (a.kv_bf16)
    attn_span_impl<Avx512Attn, uint16_t>(a, b, kh, lo, hi, part);
  else
    attn_span_impl<Avx512Attn, float>(a, b, kh, lo, hi, part);
}

}  // namespace ft
