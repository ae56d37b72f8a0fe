// AVX2 + FMA + F16C kernel shared by MXFP4 and NVFP4 (e2m1 codes, one 8-bit scale per B columns).
// Included only by x86_avx2_mxfp4.cpp and x86_avx2_nvfp4.cpp (compiled with -mavx2 -mfma -mf16c).
//
// Decode of 32 columns (16 bytes): low / high nibbles -> vpshufb over a 16-entry table of 2 * e2m1
// as int8 -> vpmovsxbd -> vcvtdq2ps (exact; the 0.5 is folded into the scale table). That yields the
// order [even cols 0..14][odd 1..15] per 16 columns, so x is permuted the same way once per token
// block instead of re-interleaving the weights. (An IEEE-half table + vcvtph2ps measured the same.)
// A block's partial dot is accumulated unscaled and folded in with one FMA: acc = fma(s, p, acc).
// Token blocks of 4 stay in registers (one decode per 4 tokens); for many tokens, token blocks are
// the outer loop and the columns are tiled so the x tile stays in L1 while rows stream through it.
#pragma once
#include <immintrin.h>

#include <algorithm>

#include "cpu/arch/rows_common.h"  // e2m1_rows, the shared driver
#include "cpu/formats.h"

namespace ft {
namespace avx2_e2m1 {

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 2 * e2m1 as int8 (sign bit 3): 0, 1, 2, 3, 4, 6, 8, 12, then negatives; the 0.5 goes into the scale table.
static constexpr float kLutScale = 0.5f;
static inline __m128i lut() { return _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12); }
static inline __m256 widen_lo(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
static inline __m256 widen_hi(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v))); }

// 16 bytes = 32 columns -> w0 (even 0..14), w1 (odd 1..15), w2 (even 16..30), w3 (odd 17..31).
static inline void decode32(const uint8_t* p, __m256& w0, __m256& w1, __m256& w2, __m256& w3) {
  const __m128i t = lut(), m = _mm_set1_epi8(0x0F);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i L = _mm_shuffle_epi8(t, _mm_and_si128(q, m));
  const __m128i H = _mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(q, 4), m));
  w0 = widen_lo(L);
  w1 = widen_lo(H);
  w2 = widen_hi(L);
  w3 = widen_hi(H);
}

// 8 bytes = 16 columns -> w0 (even 0..14), w1 (odd 1..15).
static inline void decode16(const uint8_t* p, __m256& w0, __m256& w1) {
  const __m128i t = lut(), m = _mm_set1_epi8(0x0F);
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  w0 = widen_lo(_mm_shuffle_epi8(t, _mm_and_si128(q, m)));
  w1 = widen_lo(_mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(q, 4), m)));
}

// dst[16g + k] = src[16g + 2k], dst[16g + 8 + k] = src[16g + 2k + 1] (k < 8): the decode order.
static inline void permute_x(const float* src, float* dst, int64_t cols) {
  for (int64_t c = 0; c < cols; c += 16) {
    __m256 a = _mm256_loadu_ps(src + c), b = _mm256_loadu_ps(src + c + 8);
    __m256 ev = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), od = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(dst + c, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), _MM_SHUFFLE(3, 1, 2, 0))));
    _mm256_storeu_ps(dst + c + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), _MM_SHUFFLE(3, 1, 2, 0))));
  }
}

// out[t * ldy] += sum over columns [c0, c1) of W[row] * x_t, for NT tokens; B = columns per scale.
// q / s: the row's codes and scale bytes; stab: scale byte -> fp32; xp: permuted x, token t at t * ldp.
template <int B, int NT>
static inline void dot_tile(const uint8_t* q, const uint8_t* s, const float* stab, int64_t c0, int64_t c1,
                            const float* xp, int64_t ldp, float* out, int64_t ldy) {
  static_assert(B == 16 || B == 32, "e2m1 blocks are 16 or 32 columns");
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* qc = q + c0 / 2;  // c0 % 32 == 0
  const uint8_t* sc = s + c0 / B;
  const float* xc = xp + c0;
  int64_t c = c0;
  for (; c + 32 <= c1; c += 32, qc += 16, sc += 32 / B, xc += 32) {
    __m256 w0, w1, w2, w3;
    _mm_prefetch(reinterpret_cast<const char*>(qc) + 2048, _MM_HINT_T0);  // from DRAM: 4.2 -> 4.85 GB/s a core
    decode32(qc, w0, w1, w2, w3);
    if (B == 32) {
      const __m256 sv = _mm256_broadcast_ss(stab + sc[0]);
      for (int t = 0; t < NT; ++t) {
        const float* x = xc + t * ldp;
        __m256 p = _mm256_mul_ps(w0, _mm256_loadu_ps(x));
        p = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), p);
        p = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), p);
        p = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), p);
        acc[t] = _mm256_fmadd_ps(sv, p, acc[t]);
      }
    } else {
      const __m256 sa = _mm256_broadcast_ss(stab + sc[0]), sb = _mm256_broadcast_ss(stab + sc[1]);
      for (int t = 0; t < NT; ++t) {
        const float* x = xc + t * ldp;
        __m256 pa = _mm256_mul_ps(w0, _mm256_loadu_ps(x));
        __m256 pb = _mm256_mul_ps(w2, _mm256_loadu_ps(x + 16));
        pa = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), pa);
        pb = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), pb);
        acc[t] = _mm256_fmadd_ps(sb, pb, _mm256_fmadd_ps(sa, pa, acc[t]));
      }
    }
  }
  if (B == 16 && c < c1) {  // a last block of 16 columns
    __m256 w0, w1;
    decode16(qc, w0, w1);
    const __m256 sa = _mm256_broadcast_ss(stab + sc[0]);
    for (int t = 0; t < NT; ++t) {
      const float* x = xc + t * ldp;
      __m256 p = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), _mm256_mul_ps(w0, _mm256_loadu_ps(x)));
      acc[t] = _mm256_fmadd_ps(sa, p, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * ldy] += hsum(acc[t]);
}

FT_E2M1_ROWS()  // Kern and rows<B> (rows_common.h)

}  // namespace avx2_e2m1
}  // namespace ft
