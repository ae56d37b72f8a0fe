// NEON (AArch64) kernel shared by MXFP4 and NVFP4 (e2m1 codes, one 8-bit scale per B columns).
// Included only by arm_neon_mxfp4.cpp and arm_neon_nvfp4.cpp.
//
// Decode of 32 columns (16 bytes): low / high nibbles -> tbl over a 16-entry table of the high byte
// of each e2m1 value as an IEEE half (every e2m1 value has a zero low byte) -> zip with zero bytes
// -> fcvtl/fcvtl2 to fp32 (exact). That yields [even cols 0..14][odd 1..15] per 16 columns, so x is
// permuted the same way once per token block. A block's partial dot is accumulated unscaled and
// folded in with one FMA; 4 tokens share each decoded vector; prefill tiles the columns (see AVX2).
#pragma once
#include <arm_neon.h>

#include <algorithm>

#include "cpu/arch/rows_common.h"  // e2m1_rows, the shared driver
#include "cpu/formats.h"

namespace ft {
namespace neon_e2m1 {

static constexpr float kLutScale = 1.f;  // the table holds e2m1 exactly

static inline uint8x16_t lut() {
  static const uint8_t t[16] = {0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46,
                                0x80, 0xB8, 0xBC, 0xBE, 0xC0, 0xC2, 0xC4, 0xC6};
  return vld1q_u8(t);
}

// 8 half-high-bytes (low half of v, or high half) -> 8 fp32 in two vectors.
static inline void widen(uint8x16_t zipped, float32x4_t& a, float32x4_t& b) {
  const float16x8_t h = vreinterpretq_f16_u8(zipped);
  a = vcvt_f32_f16(vget_low_f16(h));
  b = vcvt_high_f32_f16(h);
}

// 16 bytes = 32 columns -> w[0..7]: cols 0..15 as [even][odd] in w[0..3], cols 16..31 in w[4..7].
static inline void decode32(const uint8_t* p, uint8x16_t t, float32x4_t* w) {
  const uint8x16_t q = vld1q_u8(p), z = vdupq_n_u8(0);
  const uint8x16_t L = vqtbl1q_u8(t, vandq_u8(q, vdupq_n_u8(0x0F))), H = vqtbl1q_u8(t, vshrq_n_u8(q, 4));
  widen(vzip1q_u8(z, L), w[0], w[1]);
  widen(vzip1q_u8(z, H), w[2], w[3]);
  widen(vzip2q_u8(z, L), w[4], w[5]);
  widen(vzip2q_u8(z, H), w[6], w[7]);
}

// 8 bytes = 16 columns -> w[0..3] as [even][odd].
static inline void decode16(const uint8_t* p, uint8x16_t t, float32x4_t* w) {
  const uint8x8_t q = vld1_u8(p);
  const uint8x16_t q2 = vcombine_u8(vand_u8(q, vdup_n_u8(0x0F)), vshr_n_u8(q, 4)), z = vdupq_n_u8(0);
  const uint8x16_t LH = vqtbl1q_u8(t, q2);  // bytes 0..7: low nibbles, 8..15: high nibbles
  widen(vzip1q_u8(z, LH), w[0], w[1]);
  widen(vzip2q_u8(z, LH), w[2], w[3]);
}

// dst[16g + k] = src[16g + 2k], dst[16g + 8 + k] = src[16g + 2k + 1] (k < 8): the decode order.
static inline void permute_x(const float* src, float* dst, int64_t cols) {
  for (int64_t c = 0; c < cols; c += 16) {
    const float32x4x2_t a = vld2q_f32(src + c), b = vld2q_f32(src + c + 8);
    vst1q_f32(dst + c, a.val[0]);
    vst1q_f32(dst + c + 4, b.val[0]);
    vst1q_f32(dst + c + 8, a.val[1]);
    vst1q_f32(dst + c + 12, b.val[1]);
  }
}

static inline float32x4_t dot4(const float32x4_t* w, const float* x) {  // 16 columns, unscaled
  float32x4_t a = vmulq_f32(w[0], vld1q_f32(x)), b = vmulq_f32(w[1], vld1q_f32(x + 4));
  a = vfmaq_f32(a, w[2], vld1q_f32(x + 8));
  b = vfmaq_f32(b, w[3], vld1q_f32(x + 12));
  return vaddq_f32(a, b);
}

// out[t * ldy] += sum over columns [c0, c1) of W[row] * x_t, for NT tokens; B = columns per scale.
template <int B, int NT>
static inline void dot_tile(const uint8_t* q, const uint8_t* s, const float* stab, int64_t c0, int64_t c1,
                            const float* xp, int64_t ldp, float* out, int64_t ldy) {
  static_assert(B == 16 || B == 32, "e2m1 blocks are 16 or 32 columns");
  const uint8x16_t t8 = lut();
  float32x4_t acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = vdupq_n_f32(0.f);
  const uint8_t* qc = q + c0 / 2;  // c0 % 32 == 0
  const uint8_t* sc = s + c0 / B;
  const float* xc = xp + c0;
  int64_t c = c0;
  float32x4_t w[8];
  for (; c + 32 <= c1; c += 32, qc += 16, sc += 32 / B, xc += 32) {
    decode32(qc, t8, w);
    if (B == 32) {
      const float sv = stab[sc[0]];
      for (int t = 0; t < NT; ++t) {
        const float* x = xc + t * ldp;
        acc[t] = vfmaq_n_f32(acc[t], vaddq_f32(dot4(w, x), dot4(w + 4, x + 16)), sv);
      }
    } else {
      const float sa = stab[sc[0]], sb = stab[sc[1]];
      for (int t = 0; t < NT; ++t) {
        const float* x = xc + t * ldp;
        acc[t] = vfmaq_n_f32(vfmaq_n_f32(acc[t], dot4(w, x), sa), dot4(w + 4, x + 16), sb);
      }
    }
  }
  if (B == 16 && c < c1) {  // a last block of 16 columns
    decode16(qc, t8, w);
    const float sa = stab[sc[0]];
    for (int t = 0; t < NT; ++t) acc[t] = vfmaq_n_f32(acc[t], dot4(w, xc + t * ldp), sa);
  }
  for (int t = 0; t < NT; ++t) out[t * ldy] += vaddvq_f32(acc[t]);
}

FT_E2M1_ROWS()  // Kern and rows<B> (rows_common.h)

}  // namespace neon_e2m1
}  // namespace ft
