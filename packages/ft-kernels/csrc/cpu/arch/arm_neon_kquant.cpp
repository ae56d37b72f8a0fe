// NEON, GGUF K-quant formats (Q4_K, Q5_K, Q6_K): kquant_rows.h with 8 int8 codes per vector (a pair
// of float32x4), widened to 16 and 32 bits and converted to fp32 (exact).
#include "cpu/arch/arm_neon.h"
#include "cpu/arch/kquant_rows.h"

namespace ft {
namespace {
struct I8Neon {
  static V8 i8(const int8_t* p) {
    const int16x8_t h = vmovl_s8(vld1_s8(p));
    return V8{vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), vcvtq_f32_s32(vmovl_high_s16(h))};
  }
  static float f16(const uint8_t* p) {
    __fp16 h;
    std::memcpy(&h, p, 2);
    return static_cast<float>(h);
  }
};
}  // namespace

void rows_q4k_neon(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                   int64_t ldy) {
  kq_rows<Neon, I8Neon, Q4K>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q5k_neon(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                   int64_t ldy) {
  kq_rows<Neon, I8Neon, Q5K>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_q6k_neon(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                   int64_t ldy) {
  kq_rows<Neon, I8Neon, Q6K>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
