// AVX2, GGUF K-quant formats (Q4_K, Q5_K, Q6_K, Q3_K, Q2_K): kquant_rows.h with 8 int8 codes per vector,
// sign-extended to 32 bits and converted to fp32 (exact).
#include "cpu/arch/kquant_rows.h"
#include "cpu/arch/x86_avx2.h"

namespace ft {
namespace {
struct I8Avx2 {
  static __m256 i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static float f16(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }
};
}  // namespace

void rows_q4k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_rows<Avx2, I8Avx2, Q4K>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q5k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_rows<Avx2, I8Avx2, Q5K>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q6k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_rows<Avx2, I8Avx2, Q6K>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q3k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_rows<Avx2, I8Avx2, Q3K>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q2k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  kq_rows<Avx2, I8Avx2, Q2K>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
