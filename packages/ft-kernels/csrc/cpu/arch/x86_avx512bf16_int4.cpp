// AVX-512 BF16, INT4 weights (groups of 32, 64 or 128k columns: dispatch.cpp checks) x bf16 activations: the
// bf16 table kernel of x86_avx512bf16_lut4.h (table q - 8, or q and zero * sum(x) subtracted per lane), and for
// symmetric INT4 from 7 tokens a call (prefill) the tokens-in-lanes kernel of x86_avx512bf16_tokgemm.h.
#include "cpu/arch/x86_avx512bf16_lut4.h"
#include "cpu/arch/x86_avx512bf16_tokgemm.h"

namespace ft {

void rows_bf16act_int4_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                  int64_t ldx, float* Y, int64_t ldy) {
  avx512_nib::with_int4_lanes<avx512_nib::Int4Lanes>(m, [&](auto d) {
    using D = decltype(d);
    auto row_wise = [&](const uint16_t* Xr, int64_t nr, float* Yr) {
      avx512bf16_lut4::rows<D>(m, r0, r1, Xr, nr, ldx, Yr, ldy);
    };
    if constexpr (D::kZero)
      row_wise(X, ntok, Y);
    else
      avx512bf16_tokgemm::then_rows<avx512bf16_lut4::NibT<D>>(m, r0, r1, X, ntok, ldx, Y, ldy, row_wise);
  });
}

}  // namespace ft
