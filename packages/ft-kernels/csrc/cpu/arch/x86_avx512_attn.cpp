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
};
}  // namespace

void attn_head_avx512(const DecodeAttn& a, int64_t b, int64_t kh) {
  if (a.kv_bf16)
    attn_head_impl<Avx512Attn, uint16_t>(a, b, kh);
  else
    attn_head_impl<Avx512Attn, float>(a, b, kh);
}

}  // namespace ft
