// NEON, INT4 weights (sym and asym) with fp32 scales per `group` columns; the decode of x86_avx2_int4.cpp:
// 8 bytes -> 16-bit lanes, nibbles masked in place are f16 subnormals q * 2^-24 and 16q * 2^-24, widened
// exactly by fcvtl; prep_x orders and scales x to match.
#include "cpu/arch/arm_neon.h"

namespace ft {
namespace {
struct Int4Neon : Int4Common {
  static constexpr float kXLo = 16777216.f, kXHi = 1048576.f;  // 2^24, 2^20: undo q * 2^-24 and 16q * 2^-24
  static void decode(const uint8_t* row, int64_t c, V8& w0, V8& w1) {
    const uint16x8_t b = vmovl_u8(vld1_u8(row + c / 2));
    w0 = Neon::from_f16(vandq_u16(b, vdupq_n_u16(0x000f)));  // columns c, c+2, ..., c+14
    w1 = Neon::from_f16(vandq_u16(b, vdupq_n_u16(0x00f0)));  // columns c+1, ..., c+15 (x16)
  }
};
}  // namespace

void rows_int4_neon(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  group_rows<Neon, Int4Neon>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
