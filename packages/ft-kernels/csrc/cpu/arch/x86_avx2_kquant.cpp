// AVX2, GGUF K-quant formats (Q4_K, Q5_K, Q6_K, Q3_K, Q2_K) over fp32 activations: kquant_nib.h with 8 lanes;
// Q3_K from 3 tokens a call through kquant_rows.h (its decode pass shared by the tile's tokens: 22.7 against 19.1
// GMAC/s a core at 4 tokens, Q3_K's high bits costing kquant_nib.h 3 more instructions per vector).
#include "cpu/arch/kquant_nib.h"
#include "cpu/arch/kquant_rows.h"
#include "cpu/arch/x86_avx2.h"

namespace ft {
namespace {
struct I8Avx2 {  // kquant_rows.h's converter
  static __m256 i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static float f16(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }
};

struct NibAvx2 : Avx2 {  // kquant_nib.h's traits
  using Vi = __m256i;
  static Vi u8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static Vi band(Vi v, int k) { return _mm256_and_si256(v, _mm256_set1_epi32(k)); }
  static Vi bor(Vi a, Vi b) { return _mm256_or_si256(a, b); }
  template <int S>
  static Vi shl(Vi v) {
    if constexpr (S >= 0) return _mm256_slli_epi32(v, S);
    else return _mm256_srli_epi32(v, -S);
  }
  static V cvt(Vi v) { return _mm256_cvtepi32_ps(v); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V add8(V t, __m256 v) { return _mm256_add_ps(t, v); }
};
}  // namespace

void rows_q4k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_nib::rows<NibAvx2, kq_nib::Q45<NibAvx2, false>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q5k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_nib::rows<NibAvx2, kq_nib::Q45<NibAvx2, true>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q6k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_nib::rows<NibAvx2, kq_nib::Q6<NibAvx2>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q3k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  if (ntok >= 3) return kq_rows<Avx2, I8Avx2, Q3K>(m, r0, r1, X, ntok, ldx, Y, ldy);
  kq_nib::rows<NibAvx2, kq_nib::Q23<NibAvx2, true>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q2k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_nib::rows<NibAvx2, kq_nib::Q23<NibAvx2, false>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
