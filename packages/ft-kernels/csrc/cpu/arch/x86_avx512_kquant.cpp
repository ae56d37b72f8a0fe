// AVX-512, GGUF K-quant formats (Q4_K, Q5_K, Q6_K, Q3_K, Q2_K) over fp32 activations: kquant_nib.h with 16
// lanes.
#include "cpu/arch/kquant_nib.h"
#include "cpu/arch/x86_avx512.h"

namespace ft {
namespace {
struct NibAvx512 : Avx512 {  // kquant_nib.h's traits
  using Vi = __m512i;
  static Vi u8(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static Vi band(Vi v, int k) { return _mm512_and_si512(v, _mm512_set1_epi32(k)); }
  static Vi bor(Vi a, Vi b) { return _mm512_or_si512(a, b); }
  template <int S>
  static Vi shl(Vi v) {
    if constexpr (S >= 0) return _mm512_slli_epi32(v, S);
    else return _mm512_srli_epi32(v, -S);
  }
  static V cvt(Vi v) { return _mm512_cvtepi32_ps(v); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V bcast(const float* p) { return _mm512_set1_ps(*p); }
  static V add8(V t, __m256 v) { return _mm512_add_ps(t, _mm512_insertf32x8(_mm512_setzero_ps(), v, 0)); }
};
}  // namespace

void rows_q4k_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_nib::rows<NibAvx512, kq_nib::Q45<NibAvx512, false>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q5k_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_nib::rows<NibAvx512, kq_nib::Q45<NibAvx512, true>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q6k_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_nib::rows<NibAvx512, kq_nib::Q6<NibAvx512>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q3k_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_nib::rows<NibAvx512, kq_nib::Q23<NibAvx512, true>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q2k_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_nib::rows<NibAvx512, kq_nib::Q23<NibAvx512, false>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
