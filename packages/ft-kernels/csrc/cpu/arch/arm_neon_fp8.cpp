// NEON, FP8 e4m3 weights with fp32 scales per `group` columns; the decode of x86_avx2_fp8.cpp: b << 8
// (widening shift), arithmetic >> 1, clear bit 14 -> the f16 of the value times 2^-8 (2^8 folded into the
// scale), then fcvtl. NaN codes decode as +-480.
#include "cpu/arch/arm_neon.h"

namespace ft {
namespace {
struct Fp8Neon : Fp8Common {
  static uint16x8_t to_f16(uint16x8_t b8) {  // b8 = b << 8
    return vandq_u16(vreinterpretq_u16_s16(vshrq_n_s16(vreinterpretq_s16_u16(b8), 1)), vdupq_n_u16(0xbfff));
  }
  static void decode(const uint8_t* row, int64_t c, V8& w0, V8& w1) {
    const uint8x16_t v = vld1q_u8(row + c);
    w0 = Neon::from_f16(to_f16(vshll_n_u8(vget_low_u8(v), 8)));  // columns c..c+7
    w1 = Neon::from_f16(to_f16(vshll_high_n_u8(v, 8)));          // columns c+8..c+15
  }
};
}  // namespace

void rows_fp8_neon(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                   int64_t ldy) {
  group_rows<Neon, Fp8Neon>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
