// NEON, F16 weights: fcvtl widens halves to fp32 exactly (subnormals too), FMA against fp32 x.
#include "cpu/arch/arm_neon.h"

namespace ft {
namespace {
struct F16Neon {
  static V8 load(const uint8_t* row, int64_t c) { return Neon::from_f16(vld1q_u16(reinterpret_cast<const uint16_t*>(row) + c)); }
  static float scalar(const uint8_t* row, int64_t c) { return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]); }
};
}  // namespace

void rows_f16_neon(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                   int64_t ldy) {
  dense_rows<Neon, F16Neon>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
