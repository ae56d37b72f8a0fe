// The AVX-512 traits of the attention kernels (attn_common.h's I over zmm): bf16 rows widened exactly, the
// vector exp_neg's pieces. Shared by the decode span (x86_avx512_attn.cpp) and the prefill task
// (x86_avx512bf16_attn_prefill.cpp); each file compiles it with its own flags, in an anonymous namespace.
#pragma once
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
  static V round(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2(V n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static V zero_below(V x, float lim, V v) {  // v where !(x < lim), NaN included
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(lim), _CMP_NLT_UQ), v);
  }
};
}  // namespace
}  // namespace ft
