// AVX-512: the per-sub-block scales of GGUF's K-quant blocks (cpu/formats.h) as one vector, shared by the
// bf16-activation (x86_avx512bf16_kquant.cpp) and int8-activation (x86_avx512vnni_q8kquant.cpp) kernels.
// Included by files compiled with AVX-512 F/BW/VL/DQ and F16C.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/arch/x86_kq_fields.h"

namespace ft {
namespace {

// Q4_K / Q5_K: the 8 sub-block scales d * sc (lanes 0..7) and negated mins -(dmin * m) (lanes 8..15), the
// values of kquant_rows.h's kq_scales_mins (each one exact product) in one vector.
inline __m512 kq_scale_vec(const uint8_t* b) {
  const __m128i v = kq_fields6(b);
  uint32_t dd;  // d, dmin: two f16
  std::memcpy(&dd, b, 4);
  const __m512 ds = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd))));
  const __m512 d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), ds);
  const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)), d);
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(p), _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN)));
}

// Q6_K: d * sc for the 16 sub-blocks of 16 columns (exact: int8 x f16).
inline __m512 q6k_scale_vec(const uint8_t* b) {
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
  return _mm512_mul_ps(sc, _mm512_set1_ps(_cvtsh_ss(static_cast<uint16_t>(b[208] | (b[209] << 8)))));
}

}  // namespace
}  // namespace ft
