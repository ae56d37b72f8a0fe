// AVX2 + FMA, BF16 weights: 16 bf16 (one 256-bit load) give the even columns by a shift left 16 and the odd
// ones by masking the low halves: two exact fp32 vectors in two instructions, FMA against x permuted to match.
#include "cpu/arch/x86_avx2.h"

namespace ft {
namespace {
struct Bf16Avx2 {
  static void decode(const uint8_t* row, int64_t c, __m256& w0, __m256& w1) {
    // columns c, c+2, ... in w0; c+1, c+3, ... in w1
    bf16_even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + c)), w0, w1);
  }
  static float scalar(const uint8_t* row, int64_t c) { return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]); }
};
}  // namespace

void rows_bf16_avx2(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  pair_rows<Avx2, Bf16Avx2>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
