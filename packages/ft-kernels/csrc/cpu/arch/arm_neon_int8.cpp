// NEON, INT8 weights with fp32 scales per `group` columns (GGUF Q8_0 is group 32): 16 bytes widened
// to 16-bit, then 32-bit, and converted to fp32 (exact); the fp8 files' group loop.
#include "cpu/arch/arm_neon.h"

namespace ft {
namespace {
struct Int8Neon : Fp8Common {
  static constexpr float kScaleMul = 1.f;
  static V8 f32(int16x8_t h) {
    return V8{vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), vcvtq_f32_s32(vmovl_high_s16(h))};
  }
  static void decode(const uint8_t* row, int64_t c, V8& w0, V8& w1) {
    const int8x16_t v = vld1q_s8(reinterpret_cast<const int8_t*>(row + c));
    w0 = f32(vmovl_s8(vget_low_s8(v)));  // columns c..c+7
    w1 = f32(vmovl_high_s8(v));          // columns c+8..c+15
  }
};
}  // namespace

void rows_int8_neon(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  group_rows<Neon, Int8Neon>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
