// AVX2: the bf16 element-wise pieces of a decode step that run on the calling thread between the kernels -- RMSNorm
// of bf16 rows (norm.cpp), fp32 -> bf16 rounding (bf16act.cpp) and the bf16 residual sums (decode_layer.cpp) -- 8
// lanes at a time, bit for bit the scalar loops: the same operations in the same order (the sum of squares in the
// scalar code's 16 partial sums, one mul and one add each: built with -ffp-contract=off), the same rounding to
// nearest even with NaN kept quiet. A 48-layer decode step makes ~8 such calls a layer on rows of 2048; the scalar
// loops (SSE2 at best: no F16C / AVX2 in the generic build) took ~1 % of a step.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "cpu/formats.h"  // bf16_to_f32, f32_to_bf16: the scalar tails

namespace ft {
namespace {

inline __m256 load_bf16(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// f32_to_bf16 on 8 lanes: round to nearest even, a NaN's quiet bit set; as 8 bf16 values widened back to fp32 bits.
inline __m256i round_bf16(__m256 f) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_slli_epi32(_mm256_blendv_epi8(r, q, nan), 16);
}

// 8 rounded values (round_bf16's fp32 bits) as bf16 at p.
inline void store_bf16(uint16_t* p, __m256i b) {
  const __m256i h = _mm256_srli_epi32(b, 16);
  const __m128i v = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
}

}  // namespace

void rms_norm_bf16_avx2(const uint16_t* x, const void* w, bool w_f32, int64_t rows, int64_t D, float eps, uint16_t* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = x + r * D;
    uint16_t* yr = y + r * D;
    __m256 p0 = _mm256_setzero_ps(), p1 = _mm256_setzero_ps();  // the scalar code's partial sums 0..7, 8..15
    int64_t i = 0;
    for (; i + 16 <= D; i += 16) {
      const __m256 a = load_bf16(xr + i), b = load_bf16(xr + i + 8);
      p0 = _mm256_add_ps(p0, _mm256_mul_ps(a, a));
      p1 = _mm256_add_ps(p1, _mm256_mul_ps(b, b));
    }
    alignas(32) float p[16];
    _mm256_store_ps(p, p0);
    _mm256_store_ps(p + 8, p1);
    for (; i < D; ++i) {
      const float v = bf16_to_f32(xr[i]);
      p[0] += v * v;
    }
    float s = 0.f;
    for (float v : p) s += v;
    const float inv = 1.f / std::sqrt(s / static_cast<float>(D) + eps);
    const __m256 vinv = _mm256_set1_ps(inv);
    i = 0;
    if (w_f32) {  // bf16((x r) w), rounded once
      const float* wf = static_cast<const float*>(w);
      for (; i + 8 <= D; i += 8)
        store_bf16(yr + i, round_bf16(_mm256_mul_ps(_mm256_mul_ps(load_bf16(xr + i), vinv), _mm256_loadu_ps(wf + i))));
      for (; i < D; ++i) yr[i] = f32_to_bf16(bf16_to_f32(xr[i]) * inv * wf[i]);
      continue;
    }
    const uint16_t* wb = static_cast<const uint16_t*>(w);  // bf16(w bf16(x r))
    for (; i + 8 <= D; i += 8) {
      const __m256 n = _mm256_castsi256_ps(round_bf16(_mm256_mul_ps(load_bf16(xr + i), vinv)));
      store_bf16(yr + i, round_bf16(_mm256_mul_ps(load_bf16(wb + i), n)));
    }
    for (; i < D; ++i) yr[i] = f32_to_bf16(bf16_to_f32(wb[i]) * bf16_to_f32(f32_to_bf16(bf16_to_f32(xr[i]) * inv)));
  }
}

void f32_to_bf16_avx2(const float* src, int64_t n, uint16_t* dst, float* dst_f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = round_bf16(_mm256_loadu_ps(src + i));
    store_bf16(dst + i, b);
    if (dst_f) _mm256_storeu_ps(dst_f + i, _mm256_castsi256_ps(b));
  }
  for (; i < n; ++i) {
    dst[i] = f32_to_bf16(src[i]);
    if (dst_f) dst_f[i] = bf16_to_f32(dst[i]);
  }
}

void add_bf16_avx2(uint16_t* x, const uint16_t* yb, const float* yf, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 y = yb ? load_bf16(yb + i) : _mm256_castsi256_ps(round_bf16(_mm256_loadu_ps(yf + i)));
    store_bf16(x + i, round_bf16(_mm256_add_ps(load_bf16(x + i), y)));
  }
  for (; i < n; ++i) {
    const float y = yb ? bf16_to_f32(yb[i]) : bf16_to_f32(f32_to_bf16(yf[i]));
    x[i] = f32_to_bf16(bf16_to_f32(x[i]) + y);
  }
}

}  // namespace ft
