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
};
}  // namespace

void attn_head_avx2(const DecodeAttn& a, int64_t b, int64_t kh) {
  if (a.kv_bf16)
    attn_head_impl<Avx2Attn, uint16_t>(a, b, kh);
  else
    attn_head_impl<Avx2Attn, float>(a, b, kh);
}

}  // namespace ft
