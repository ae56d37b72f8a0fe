// AVX-512 BF16, INT4 weights (groups of 32, 64 or 128k columns: dispatch.cpp checks) x bf16 activations: the
// bf16 table kernel of x86_avx512bf16_lut4.h (table q - 8, or q and zero * sum(x) subtracted per lane).
#include "cpu/arch/x86_avx512bf16_lut4.h"

namespace ft {

void rows_bf16act_int4_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                  int64_t ldx, float* Y, int64_t ldy) {
  avx512_nib::with_int4_lanes<avx512_nib::Int4Lanes>(
      m, [&](auto d) { avx512bf16_lut4::rows<decltype(d)>(m, r0, r1, X, ntok, ldx, Y, ldy); });
}

}  // namespace ft
