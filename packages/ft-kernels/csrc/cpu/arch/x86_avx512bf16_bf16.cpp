// AVX-512 BF16, BF16 weights x bf16 activations: `vdpbf16ps` on the row as stored (x86_avx512bf16.h).
#include "cpu/arch/x86_avx512bf16.h"

namespace ft {

void rows_bf16act_bf16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                  int64_t ldx, float* Y, int64_t ldy) {
  bf16_rows(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
