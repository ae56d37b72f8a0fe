// Scalar kernels for every format: decode a row to fp32, then dot it with each token.
// The ground truth the SIMD files are tested against (with the torch references in Python).
#include <vector>

#include "cpu/formats.h"

namespace ft {

static inline const float* fscale(const WeightMat& w, int64_t r) {
  return static_cast<const float*>(w.scale) + r * w.scale_stride;
}
static inline const uint8_t* bscale(const WeightMat& w, int64_t r) {
  return static_cast<const uint8_t*>(w.scale) + r * w.scale_stride;
}

static inline float f16_at(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// Column e (0..255) of one K-quant block, element by element from the layout in formats.h. Every product
// below is exact in fp32 (f16 d times a 6- or 8-bit scale times a 5- or 6-bit q: at most 24 bits), so
// Q4_K / Q5_K round once (the subtraction of the min) and Q6_K not at all: the value every kernel computes.
// Q3_K (f16 d times a scale in -32..31 times q in -4..3) is exact too, Q2_K (d sc q - dmin m, sc, m 4-bit,
// q 2-bit) rounds once, as Q4_K.
static float kquant_at(Fmt f, const uint8_t* b, int e) {
  if (f == Fmt::Q3_K || f == Fmt::Q2_K) {
    const int n = e / 128, j = (e % 128) / 32, l = e % 32;  // half, 2-bit field, byte in the half
    const int lo = (b[(f == Fmt::Q3_K ? 32 : 16) + 32 * n + l] >> (2 * j)) & 3;
    if (f == Fmt::Q3_K) {
      const int q = lo + 4 * ((b[l] >> (4 * n + j)) & 1) - 4;
      const float d = f16_at(b + 108) * static_cast<float>(q3k_scale(b + 96, e / 16) - 32);
      return d * static_cast<float>(q);
    }
    const int s = b[e / 16];
    const float d = f16_at(b + 80) * static_cast<float>(s & 0xf), m = f16_at(b + 82) * static_cast<float>(s >> 4);
    return d * static_cast<float>(lo) - m;
  }
  if (f == Fmt::Q6_K) {
    const int n = e / 128, l = e % 32, quarter = (e % 128) / 32;  // quarter: which nibble / 2-bit field
    const uint8_t lo = b[64 * n + l + 32 * (quarter & 1)] >> (4 * (quarter >> 1));
    const uint8_t hi = (b[128 + 32 * n + l] >> (2 * quarter)) & 3;
    const int q = ((lo & 0xf) | (hi << 4)) - 32;
    const float d = f16_at(b + 208) * static_cast<float>(static_cast<int8_t>(b[192 + e / 16]));
    return d * static_cast<float>(q);
  }
  const int j = e / 32, l = e % 32;  // sub-block, column in it
  int sc, mn;
  kquant_scale_min(b + 4, j, sc, mn);
  const uint8_t* qs = b + (f == Fmt::Q5_K ? 48 : 16);
  int q = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xf;
  if (f == Fmt::Q5_K) q |= ((b[16 + l] >> j) & 1) << 4;
  const float d = f16_at(b) * static_cast<float>(sc), m = f16_at(b + 2) * static_cast<float>(mn);
  return d * static_cast<float>(q) - m;
}

float weight_at(const WeightMat& w, int64_t r, int64_t c) {
  const uint8_t* q = w.q + r * w.q_stride;
  switch (w.fmt) {
    case Fmt::BF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(q)[c]);
    case Fmt::F16: return f16_to_f32(reinterpret_cast<const uint16_t*>(q)[c]);
    case Fmt::FP8_E4M3: return e4m3_to_f32(q[c]) * fscale(w, r)[c / w.group];
    case Fmt::INT8_SYM: return static_cast<float>(static_cast<int8_t>(q[c])) * fscale(w, r)[c / w.group];
    case Fmt::MXFP4: return e2m1_to_f32(q[c / 2] >> (4 * (c & 1))) * e8m0_to_f32(bscale(w, r)[c / 32]);
    case Fmt::NVFP4: return e2m1_to_f32(q[c / 2] >> (4 * (c & 1))) * e4m3_to_f32(bscale(w, r)[c / 16]) * w.global_scale;
    case Fmt::INT4_SYM:
      return (static_cast<float>((q[c / 2] >> (4 * (c & 1))) & 0xf) - 8.f) * fscale(w, r)[c / w.group];
    case Fmt::INT4_ASYM: {
      float z = static_cast<float>(w.zero[r * w.scale_stride + c / w.group]);
      return (static_cast<float>((q[c / 2] >> (4 * (c & 1))) & 0xf) - z) * fscale(w, r)[c / w.group];
    }
    case Fmt::Q4_K:
    case Fmt::Q5_K:
    case Fmt::Q6_K:
    case Fmt::Q3_K:
    case Fmt::Q2_K: return kquant_at(w.fmt, q + (c / kQK) * kquant_block_bytes(w.fmt), static_cast<int>(c % kQK));
    case Fmt::MXFP4_X16:
      return e2m1_to_f32(nib_x16_code(w.q, w.cols, r, c)) *
             e8m0_to_f32(static_cast<const uint8_t*>(w.scale)[nib_x16_scale_at(w.scale_stride, r, c / 32)]);
    case Fmt::FP8_E4M3_X16:
      return e4m3_to_f32(w.q[i8_x16_at(w.cols, r, c)]) * x16_scale(w, nib_x16_scale_at(w.scale_stride, r, c / w.group));
    case Fmt::INT8_SYM_X16:
      return static_cast<float>(static_cast<int8_t>(w.q[i8_x16_at(w.cols, r, c)])) *
             x16_scale(w, nib_x16_scale_at(w.scale_stride, r, c / w.group));
    case Fmt::INT4_SYM_X16:
      return (static_cast<float>(nib_x16_code(w.q, w.cols, r, c)) - 8.f) *
             x16_scale(w, nib_x16_scale_at(w.scale_stride, r, c / w.group));
    case Fmt::Q4_K_X16:
    case Fmt::Q5_K_X16:
    case Fmt::Q6_K_X16:
    case Fmt::Q3_K_X16: {
      uint8_t b[210];
      x16_block(w.fmt, w.q, w.cols, r, c / kQK, b);
      return kquant_at(x16_base(w.fmt), b, static_cast<int>(c % kQK));
    }
    default: return 0.f;
  }
}

void rows_scalar(const WeightMat& w, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                 int64_t ldy) {
  thread_local std::vector<float> row;
  row.resize(w.cols);
  for (int64_t r = r0; r < r1; ++r) {
    if (is_x16(w.fmt)) {  // a block at a time
      uint8_t b[210];
      for (int64_t sb = 0; sb < w.cols / kQK; ++sb) {
        x16_block(w.fmt, w.q, w.cols, r, sb, b);
        for (int e = 0; e < kQK; ++e) row[sb * kQK + e] = kquant_at(x16_base(w.fmt), b, e);
      }
    } else {
      for (int64_t c = 0; c < w.cols; ++c) row[c] = weight_at(w, r, c);
    }
    for (int64_t t = 0; t < ntok; ++t) {
      const float* x = X + t * ldx;
      float acc = 0.f;
      for (int64_t c = 0; c < w.cols; ++c) acc += row[c] * x[c];
      Y[t * ldy + (r - r0)] = acc;
    }
  }
}

}  // namespace ft
