// AVX-512, MXFP4 weights (e2m1 codes, one e8m0 scale per 32 columns): the table kernel of x86_avx512_lut4.h.
#include "cpu/arch/x86_avx512_lut4.h"

namespace ft {
void rows_mxfp4_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                       int64_t ldy) {
  avx512_lut4::rows<avx512_nib::Mxfp4Lanes>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
