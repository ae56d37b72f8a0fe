// NEON, BF16 weights: widen 8 bf16 to fp32 (shift left 16, exact), FMA against fp32 x.
#include "cpu/arch/arm_neon.h"

namespace ft {
namespace {
struct Bf16Neon {
  static V8 load(const uint8_t* row, int64_t c) {
    const uint16x8_t u = vld1q_u16(reinterpret_cast<const uint16_t*>(row) + c);
    return V8{vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(u), 16)), vreinterpretq_f32_u32(vshll_high_n_u16(u, 16))};
  }
  static float scalar(const uint8_t* row, int64_t c) { return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]); }
};
}  // namespace

void rows_bf16_neon(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  dense_rows<Neon, Bf16Neon>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
