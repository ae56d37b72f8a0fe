// NEON, MXFP4 weights (e2m1 codes, one e8m0 scale per 32 columns): see arm_neon_e2m1.h.
#include <array>

#include "cpu/arch/arm_neon_e2m1.h"

namespace ft {

void rows_mxfp4_neon(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  static const std::array<float, 256> e8m0 = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = e8m0_to_f32(static_cast<uint8_t>(i)) * neon_e2m1::kLutScale;
    return t;
  }();
  neon_e2m1::rows<32>(m, r0, r1, X, ntok, ldx, Y, ldy, e8m0.data(), 1.f);
}

}  // namespace ft
