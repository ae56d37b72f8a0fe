// Scalar q8 kernel (int8 activations) for the 4-bit (row-wise and X16) and K-quant formats: integer dot per half block of 16
// columns, scaled once. The ground truth of the SIMD q8 files; it reads the same block layout (cpu/q8.h).
#include "cpu/q8.h"

namespace ft {

// Integer code of weight (r, c) and the fp32 factor of its block of 16 / group, so that W = code * factor.
static inline void code_and_scale(const WeightMat& w, int64_t r, int64_t c, int& code, float& f) {
  static const int k2e2m1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  if (is_nib_x16(w.fmt)) {  // MXFP4_X16, INT4_SYM_X16: 16 rows interleaved (cpu/formats.h)
    const uint8_t n = nib_x16_code(w.q, w.cols, r, c);
    if (w.fmt == Fmt::MXFP4_X16) {
      code = k2e2m1[n];
      f = 0.5f * e8m0_to_f32(static_cast<const uint8_t*>(w.scale)[nib_x16_scale_at(w.scale_stride, r, c / 32)]);
    } else {
      code = n - 8;
      f = x16_scale(w, nib_x16_scale_at(w.scale_stride, r, c / w.group));
    }
    return;
  }
  const uint8_t nib = (w.q[r * w.q_stride + c / 2] >> (4 * (c & 1))) & 0xf;
  const uint8_t* bs = static_cast<const uint8_t*>(w.scale) + r * w.scale_stride;
  const float* fs = static_cast<const float*>(w.scale) + r * w.scale_stride;
  switch (w.fmt) {
    case Fmt::MXFP4: code = k2e2m1[nib]; f = 0.5f * e8m0_to_f32(bs[c / 32]); return;
    case Fmt::NVFP4: code = k2e2m1[nib]; f = 0.5f * e4m3_to_f32(bs[c / 16]) * w.global_scale; return;
    case Fmt::INT4_SYM: code = nib - 8; f = fs[c / w.group]; return;
    default: code = nib - w.zero[r * w.scale_stride + c / w.group]; f = fs[c / w.group]; return;
  }
}

static inline float f16_at(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// K-quants: the integer code of weight e (0..255) of super-block b, with its sub-block's scale and min, so that
// W = code * sc - mn (Q4_K / Q5_K: code 0..31, sc = d * scale, mn = dmin * min; Q6_K: code -32..31, mn = 0;
// Q3_K, Q2_K below).
// Q3_K: code -4..3, sc = d (scale - 32), mn = 0; Q2_K: code 0..3, sc = d scale, mn = dmin min.
static inline void kquant_code(Fmt f, const uint8_t* b, int e, int& code, float& sc, float& mn) {
  if (f == Fmt::Q3_K) {
    const int n = e / 128, j = (e % 128) / 32, l = e % 32;
    code = ((b[32 + 32 * n + l] >> (2 * j)) & 3) + 4 * ((b[l] >> (4 * n + j)) & 1) - 4;
    sc = f16_at(b + 108) * static_cast<float>(q3k_scale(b + 96, e / 16) - 32);
    mn = 0.f;
    return;
  }
  if (f == Fmt::Q2_K) {
    const int n = e / 128, j = (e % 128) / 32, l = e % 32;
    code = (b[16 + 32 * n + l] >> (2 * j)) & 3;
    sc = f16_at(b + 80) * static_cast<float>(b[e / 16] & 0xf);
    mn = f16_at(b + 82) * static_cast<float>(b[e / 16] >> 4);
    return;
  }
  if (f == Fmt::Q6_K) {
    const int n = e / 128, l = e % 32, quarter = (e % 128) / 32;
    const uint8_t lo = b[64 * n + l + 32 * (quarter & 1)] >> (4 * (quarter >> 1));
    const uint8_t hi = (b[128 + 32 * n + l] >> (2 * quarter)) & 3;
    code = ((lo & 0xf) | (hi << 4)) - 32;
    sc = f16_at(b + 208) * static_cast<float>(static_cast<int8_t>(b[192 + e / 16]));
    mn = 0.f;
    return;
  }
  const int j = e / 32, l = e % 32;
  int s, m;
  kquant_scale_min(b + 4, j, s, m);
  const uint8_t* qs = b + (f == Fmt::Q5_K ? 48 : 16);
  code = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xf;
  if (f == Fmt::Q5_K) code |= ((b[16 + l] >> j) & 1) << 4;
  sc = f16_at(b) * static_cast<float>(s);
  mn = f16_at(b + 2) * static_cast<float>(m);
}

// Y += d_x * (sc * sum(code * q) - mn * sum(q)) per half block of 16 columns (one Q6_K sub-block; half a Q4_K one).
static void rows_q8_kquant(const WeightMat& w, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  const int64_t bb = kquant_block_bytes(w.fmt);
  const bool x16 = is_x16(w.fmt);  // its blocks put back in their base format's layout
  const Fmt f = x16_base(w.fmt);
  uint8_t back[210];
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < x.ntok; ++t) {
      const int8_t* q = x.q + t * x.ldq;
      float acc = 0.f;
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = w.q + r * w.q_stride + (b / 8) * bb;
        if (x16 && b % 8 == 0) x16_block(w.fmt, w.q, w.cols, r, b / 8, back);
        if (x16) blk = back;
        for (int h = 0; h < 2; ++h) {
          int dot = 0, sum = 0;
          float sc = 0.f, mn = 0.f;
          for (int i = 16 * h; i < 16 * h + 16; ++i) {
            int code;
            kquant_code(f, blk, static_cast<int>(32 * (b % 8) + i), code, sc, mn);
            const int v = q[32 * b + (i % 2) * 16 + i / 2];
            dot += code * v;
            sum += v;
          }
          acc += x.d[t * x.ldb + b] * (sc * static_cast<float>(dot) - mn * static_cast<float>(sum));
        }
      }
      Y[t * ldy + (r - r0)] = acc;
    }
}

void rows_q8_scalar(const WeightMat& w, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  if (kquant_block_bytes(w.fmt)) return rows_q8_kquant(w, r0, r1, x, Y, ldy);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < x.ntok; ++t) {
      const int8_t* q = x.q + t * x.ldq;
      float acc = 0.f;
      for (int64_t b = 0; b < w.cols / 32; ++b)
        for (int h = 0; h < 2; ++h) {  // halves of 16 columns: NVFP4's scale blocks
          int dot = 0;
          float f = 0.f;
          for (int i = 16 * h; i < 16 * h + 16; ++i) {
            int code;
            code_and_scale(w, r, 32 * b + i, code, f);
            dot += code * q[32 * b + (i % 2) * 16 + i / 2];
          }
          acc += static_cast<float>(dot) * (f * x.d[t * x.ldb + b]);
        }
      Y[t * ldy + (r - r0)] = acc;
    }
}

}  // namespace ft
