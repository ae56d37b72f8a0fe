// AVX-512 BF16, MXFP4 weights x bf16 activations: the bf16 table kernel of x86_avx512bf16_lut4.h, and from 7
// tokens a call (prefill) the tokens-in-lanes kernel of x86_avx512bf16_tokgemm.h (decoder lut4's NibT).
#include "cpu/arch/x86_avx512bf16_lut4.h"
#include "cpu/arch/x86_avx512bf16_tokgemm.h"

namespace ft {

void rows_bf16act_mxfp4_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                   int64_t ldx, float* Y, int64_t ldy) {
  using D = avx512_nib::Mxfp4Lanes;
  avx512bf16_tokgemm::then_rows<avx512bf16_lut4::NibT<D>>(
      m, r0, r1, X, ntok, ldx, Y, ldy,
      [&](const uint16_t* Xr, int64_t nr, float* Yr) { avx512bf16_lut4::rows<D>(m, r0, r1, Xr, nr, ldx, Yr, ldy); });
}

}  // namespace ft
