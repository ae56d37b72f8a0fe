// AVX-512: the per-row scales of a Q4_K_X16 tile (cpu/formats.h), rows in the lanes, shared by the int8-activation
// (x86_avx512vnni_q4kx16.cpp), 16-bit-activation (x86_avx512vnni_x16i16.cpp) and bf16-activation
// (x86_avx512bf16_q4kx16.cpp) kernels; and the 16 rows' scales of the group-scaled X16 formats (x16_group_scales).
// Included by files compiled with AVX-512 F/BW/VL/DQ and F16C.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_kq_fields.h"  // x16_fields6
#include "cpu/formats.h"

namespace ft {
namespace {

// The 16 rows' 6-bit (sc, m) of sub-blocks j and j + 4 (j < 4) from the tile's byte planes P (x16_fields6), as fp32.
inline void x16_scale_min(const uint8_t* P, int j, __m512& sc0, __m512& mn0, __m512& sc1, __m512& mn1) {
  __m128i f[4];
  x16_fields6(P, j, f[0], f[1], f[2], f[3]);
  auto cvt = [](__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); };
  sc0 = cvt(f[0]);
  mn0 = cvt(f[1]);
  sc1 = cvt(f[2]);
  mn1 = cvt(f[3]);
}

// A tile's 16 rows' d and dmin (f16 at `at` and at + 32: Q4_K_X16's 2240 and 2272, Q5_K_X16's 2752 and 2784) as fp32.
inline __m512 x16_d(const uint8_t* tile, int64_t at = 2240) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + at)));
}
inline __m512 x16_dmin(const uint8_t* tile, int64_t at = 2240) { return x16_d(tile, at + 32); }

// The 16 rows' scales, as fp32, of block j (columns 32j..32j+31) of rows r..r+15 in a format with one scale per
// group (% 32 columns) of each row, 16 rows together (INT4_SYM_X16, INT8_SYM_X16, FP8_E4M3_X16): fp32, or f16
// (m.scale_f16: GGUF Q4_0 / Q8_0's own, 2 bytes a scale instead of 4, so Q4_0 reads 4.5 bits a weight, not 5).
inline __m512 x16_group_scales(const WeightMat& m, int64_t r, int64_t j) {
  const int64_t i = nib_x16_scale_at(m.scale_stride, r, 32 * j / m.group);
  if (m.scale_f16)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(m.scale) + i)));
  return _mm512_loadu_ps(static_cast<const float*>(m.scale) + i);
}

}  // namespace
}  // namespace ft
