// AVX-512: the per-row scales of a Q4_K_X16 tile (cpu/formats.h), rows in the lanes, shared by the int8-activation
// (x86_avx512vnni_q4kx16.cpp) and bf16-activation (x86_avx512bf16_q4kx16.cpp) kernels. Included by files compiled
// with AVX-512 F/BW/VL/DQ and F16C.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "cpu/formats.h"

namespace ft {
namespace {

// The 16 rows' 6-bit (sc, m) of sub-blocks j and j + 4 (j < 4) from the tile's 12 byte planes P (byte k of row i at
// P[16k + i]; llama.cpp's 6-bit packing, per byte), as fp32.
inline void x16_scale_min(const uint8_t* P, int j, __m512& sc0, __m512& mn0, __m512& sc1, __m512& mn1) {
  auto ld = [&](int k) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(P + 16 * k)); };
  const __m128i a = ld(j), b = ld(j + 4), c = ld(j + 8), m63 = _mm_set1_epi8(63), m15 = _mm_set1_epi8(15),
                top = _mm_set1_epi8(static_cast<char>(0xc0));
  auto f = [](__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); };
  sc0 = f(_mm_and_si128(a, m63));
  mn0 = f(_mm_and_si128(b, m63));
  sc1 = f(_mm_or_si128(_mm_and_si128(c, m15), _mm_srli_epi16(_mm_and_si128(a, top), 2)));
  mn1 = f(_mm_or_si128(_mm_and_si128(_mm_srli_epi16(c, 4), m15), _mm_srli_epi16(_mm_and_si128(b, top), 2)));
}

// A tile's 16 rows' d and dmin (f16 at `at` and at + 32: Q4_K_X16's 2240 and 2272, Q5_K_X16's 2752 and 2784) as fp32.
inline __m512 x16_d(const uint8_t* tile, int64_t at = 2240) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + at)));
}
inline __m512 x16_dmin(const uint8_t* tile, int64_t at = 2240) { return x16_d(tile, at + 32); }

}  // namespace
}  // namespace ft
