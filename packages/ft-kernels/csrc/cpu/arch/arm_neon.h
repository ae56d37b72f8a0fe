// AArch64 NEON traits for rows_common.h (included only by arm_neon_*.cpp). A vector is a pair of
// float32x4 (8 lanes), so the decoders and the blocking match the AVX2 files lane for lane.
#pragma once
#include <arm_neon.h>

#include "cpu/arch/rows_common.h"

namespace ft {
namespace {

struct V8 {
  float32x4_t a, b;  // lanes 0..3, 4..7
};

struct Neon {
  using V = V8;
  static constexpr int L = 8;
  // Rows per tile for NT tokens (index NT): 32 q registers = 16 V8.
  static constexpr int kDenseNR[5] = {0, 4, 4, 2, 2};
  static constexpr int kGroupNR[5] = {0, 4, 2, 1, 1};
  static V zero() { return V{vdupq_n_f32(0.f), vdupq_n_f32(0.f)}; }
  static V loadx(const float* p) { return V{vld1q_f32(p), vld1q_f32(p + 4)}; }
  static V fma(V a, V b, V c) { return V{vfmaq_f32(c.a, a.a, b.a), vfmaq_f32(c.b, a.b, b.b)}; }
  static V add(V a, V b) { return V{vaddq_f32(a.a, b.a), vaddq_f32(a.b, b.b)}; }
  static V bcast(float s) { return V{vdupq_n_f32(s), vdupq_n_f32(s)}; }
  static V mul(V a, V b) { return V{vmulq_f32(a.a, b.a), vmulq_f32(a.b, b.b)}; }
  static void store(float* p, V v) {
    vst1q_f32(p, v.a);
    vst1q_f32(p + 4, v.b);
  }
  // a = x0..x7, b = x8..x15 -> a = x0, x2, ..., x14; b = x1, x3, ..., x15
  static void deint(V& a, V& b) {
    const V e{vuzp1q_f32(a.a, a.b), vuzp1q_f32(b.a, b.b)};
    b = V{vuzp2q_f32(a.a, a.b), vuzp2q_f32(b.a, b.b)};
    a = e;
  }
  static float hsum(V v) { return vaddvq_f32(vaddq_f32(v.a, v.b)); }
  // 8 f16 bit patterns -> fp32 (fcvtl: exact, subnormals included).
  static V from_f16(uint16x8_t h) {
    const float16x8_t f = vreinterpretq_f16_u16(h);
    return V{vcvt_f32_f16(vget_low_f16(f)), vcvt_high_f32_f16(f)};
  }
};

}  // namespace
}  // namespace ft
