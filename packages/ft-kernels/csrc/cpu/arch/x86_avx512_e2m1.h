// AVX-512 (F/BW/VL) kernel shared by MXFP4 and NVFP4: the AVX2 kernel (x86_avx2_e2m1.h) on 16 lanes.
// Included only by x86_avx512_mxfp4.cpp and x86_avx512_nvfp4.cpp.
//
// Decode of 32 columns (16 bytes): low / high nibbles -> vpshufb over 2 * e2m1 as int8 -> the low
// halves of both (even cols 0..14, odd 1..15) joined -> vpmovsxbd zmm -> vcvtdq2ps: one zmm per 16
// columns in the order [even 0..14][odd 1..15], x permuted to match once per token block. A block's
// partial dot is accumulated unscaled and folded in with one FMA; 4 tokens share each decoded vector.
#pragma once
#include <immintrin.h>

#include <algorithm>

#include "cpu/arch/rows_common.h"  // e2m1_rows, the shared driver
#include "cpu/formats.h"

namespace ft {
namespace avx512_e2m1 {

static constexpr float kLutScale = 0.5f;  // the table holds 2 * e2m1
static inline __m128i lut() { return _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12); }

// 16 bytes = 32 columns -> w0 (cols 0..15), w1 (cols 16..31), each as [even][odd].
static inline void decode32(const uint8_t* p, __m512& w0, __m512& w1) {
  const __m128i t = lut(), m = _mm_set1_epi8(0x0F);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i L = _mm_shuffle_epi8(t, _mm_and_si128(q, m));
  const __m128i H = _mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(q, 4), m));
  w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpacklo_epi64(L, H)));
  w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpackhi_epi64(L, H)));
}

// 8 bytes = 16 columns -> w0 as [even][odd].
static inline __m512 decode16(const uint8_t* p) {
  const __m128i t = lut(), m = _mm_set1_epi8(0x0F);
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i L = _mm_shuffle_epi8(t, _mm_and_si128(q, m));
  const __m128i H = _mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(q, 4), m));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpacklo_epi64(L, H)));
}

// dst[16g + k] = src[16g + 2k], dst[16g + 8 + k] = src[16g + 2k + 1] (k < 8): the decode order.
static inline void permute_x(const float* src, float* dst, int64_t cols) {
  const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t c = 0; c < cols; c += 16) _mm512_storeu_ps(dst + c, _mm512_permutexvar_ps(idx, _mm512_loadu_ps(src + c)));
}

// out[t * ldy] += sum over columns [c0, c1) of W[row] * x_t, for NT tokens; B = columns per scale.
template <int B, int NT>
static inline void dot_tile(const uint8_t* q, const uint8_t* s, const float* stab, int64_t c0, int64_t c1,
                            const float* xp, int64_t ldp, float* out, int64_t ldy) {
  static_assert(B == 16 || B == 32, "e2m1 blocks are 16 or 32 columns");
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const uint8_t* qc = q + c0 / 2;  // c0 % 32 == 0
  const uint8_t* sc = s + c0 / B;
  const float* xc = xp + c0;
  int64_t c = c0;
  for (; c + 32 <= c1; c += 32, qc += 16, sc += 32 / B, xc += 32) {
    __m512 w0, w1;
    decode32(qc, w0, w1);
    if (B == 32) {
      const __m512 sv = _mm512_set1_ps(stab[sc[0]]);
      for (int t = 0; t < NT; ++t) {
        const float* x = xc + t * ldp;
        __m512 p = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), _mm512_mul_ps(w0, _mm512_loadu_ps(x)));
        acc[t] = _mm512_fmadd_ps(sv, p, acc[t]);
      }
    } else {
      const __m512 sa = _mm512_set1_ps(stab[sc[0]]), sb = _mm512_set1_ps(stab[sc[1]]);
      for (int t = 0; t < NT; ++t) {
        const float* x = xc + t * ldp;
        __m512 pa = _mm512_mul_ps(w0, _mm512_loadu_ps(x)), pb = _mm512_mul_ps(w1, _mm512_loadu_ps(x + 16));
        acc[t] = _mm512_fmadd_ps(sb, pb, _mm512_fmadd_ps(sa, pa, acc[t]));
      }
    }
  }
  if (B == 16 && c < c1) {  // a last block of 16 columns
    const __m512 w0 = decode16(qc), sa = _mm512_set1_ps(stab[sc[0]]);
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_fmadd_ps(sa, _mm512_mul_ps(w0, _mm512_loadu_ps(xc + t * ldp)), acc[t]);
  }
  for (int t = 0; t < NT; ++t) out[t * ldy] += _mm512_reduce_add_ps(acc[t]);
}

FT_E2M1_ROWS()  // Kern and rows<B> (rows_common.h)

}  // namespace avx512_e2m1
}  // namespace ft
