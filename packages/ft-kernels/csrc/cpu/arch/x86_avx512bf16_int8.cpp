// AVX-512 BF16, INT8 weights (GGUF Q8_0: groups of 32) x bf16 activations: from 12 tokens a call (prefill) the
// tokens-in-lanes kernel of x86_avx512bf16_tokgemm.h (the codes, -128..127, exact in bf16; a group's fp32 scale
// per 32 columns); fewer tokens, rows not in whole blocks of 64 columns and groups that are not multiples of
// 32 take the fp32 kernel on x widened to fp32 (exact), as they did before this file.
#include <immintrin.h>

#include "cpu/arch/x86_avx512bf16_tokgemm.h"
#include "cpu/bf16act.h"
#include "cpu/dispatch.h"

namespace ft {
namespace {

struct Int8T {
  static constexpr int kCols = 64, kSub = 32;
  static constexpr bool kMins = false;
  static constexpr int kMin16 = kInt8TokMin, kMin8 = 0;
  static void decode(const WeightMat& m, int64_t row, int64_t b, uint16_t* codes, float* sm) {
    const int8_t* q = reinterpret_cast<const int8_t*>(m.q + row * m.q_stride) + 64 * b;
    FT_UNROLL for (int u = 0; u < 4; ++u) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * u));
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 16 * u), (__m256i)h);
    }
    const float* s = static_cast<const float*>(m.scale) + row * m.scale_stride;
    sm[0] = s[64 * b / m.group];
    sm[1] = s[(64 * b + 32) / m.group];
  }
};

}  // namespace

int64_t tok_rows_bf16act_int8_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                         int64_t ldx, float* Y, int64_t ldy) {
  return m.group % 32 ? 0 : avx512bf16_tokgemm::rows<Int8T>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

void rows_bf16act_int8_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                  int64_t ldx, float* Y, int64_t ldy) {
  auto widened = [&](const uint16_t* Xr, int64_t nr, float* Yr) {
    thread_local FloatBuf xf;
    float* xw = xf.get(nr * m.cols);
    for (int64_t t = 0; t < nr; ++t) bf16_to_f32_n(Xr + t * ldx, m.cols, xw + t * m.cols);
    rows_kernel(Fmt::INT8_SYM)(m, r0, r1, xw, nr, m.cols, Yr, ldy);
  };
  if (m.group % 32)
    widened(X, ntok, Y);
  else
    avx512bf16_tokgemm::then_rows<Int8T>(m, r0, r1, X, ntok, ldx, Y, ldy, widened);
}

}  // namespace ft
