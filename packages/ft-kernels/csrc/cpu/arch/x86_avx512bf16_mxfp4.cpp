// AVX-512 BF16, MXFP4 weights x bf16 activations: the bf16 table kernel of x86_avx512bf16_lut4.h.
#include "cpu/arch/x86_avx512bf16_lut4.h"

namespace ft {

void rows_bf16act_mxfp4_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                   int64_t ldx, float* Y, int64_t ldy) {
  avx512bf16_lut4::rows<avx512_nib::Mxfp4Lanes>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
