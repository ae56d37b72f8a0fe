// AVX-512: per-lane scales of the 4-bit nibble formats over chunks of 128 columns, shared by the fp32 table
// kernel (x86_avx512_lut4.h) and the int8 VNNI kernel (x86_avx512vnni_q8.cpp). In both, lane i of chunk k
// covers the 8 columns 128k + 8i .. 128k + 8i + 7, which lie in one scale block (MXFP4: 32 columns, NVFP4: 16,
// INT4: a group of 32, 64 or 128k columns); scales(m, row, k) spreads each block's scale over its lanes.
// Columns past the matrix read scale 0. Included only by x86_avx512*.cpp files.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "cpu/formats.h"

namespace ft {
namespace avx512_nib {

// The 256 values of a one-byte scale format, built once.
template <float (*Decode)(uint8_t)>
inline const float* byte_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int i = 0; i < 256; ++i) v[i] = Decode(static_cast<uint8_t>(i));
    return v;
  }();
  return t.data();
}
inline const float* e8m0_table() { return byte_table<e8m0_to_f32>(); }
inline const float* e4m3_table() { return byte_table<e4m3_to_f32>(); }

// Four 32-column blocks (lanes 4 each) from a 256-entry table indexed by scale bytes s[0..3] (n of them exist).
inline __m512 quad_scales(const float* table, const uint8_t* s, int64_t n) {
  __m512 v = _mm512_set1_ps(table[s[0]]);
  if (n > 1) v = _mm512_mask_broadcastss_ps(v, 0xfff0, _mm_load_ss(&table[s[1]]));
  if (n > 2) v = _mm512_mask_broadcastss_ps(v, 0xff00, _mm_load_ss(&table[s[2]]));
  if (n > 3) v = _mm512_mask_broadcastss_ps(v, 0xf000, _mm_load_ss(&table[s[3]]));
  return v;
}

struct Mxfp4Lanes {  // e8m0 per 32 columns
  static constexpr bool kZero = false;
  static __m512 scales(const WeightMat& m, int64_t row, int64_t k) {
    const uint8_t* s = static_cast<const uint8_t*>(m.scale) + row * m.scale_stride + 4 * k;
    return quad_scales(e8m0_table(), s, std::min<int64_t>(4, m.scale_stride - 4 * k));
  }
  static __m512 zeros(const WeightMat&, int64_t, int64_t) { return _mm512_setzero_ps(); }
  static float post(const WeightMat&) { return 1.f; }
};

struct Nvfp4Lanes {  // e4m3 per 16 columns (one 8-lane gather, spread over lane pairs), times the global scale
  static constexpr bool kZero = false;
  static __m512 scales(const WeightMat& m, int64_t row, int64_t k) {
    const uint8_t* s = static_cast<const uint8_t*>(m.scale) + row * m.scale_stride + 8 * k;
    const int64_t n = std::min<int64_t>(8, m.scale_stride - 8 * k);
    const __m128i b = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << n) - 1), s);
    const __m256 v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), e4m3_table(), _mm256_cvtepu8_epi32(b),
                                              _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4);
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), _mm512_castps256_ps512(v));
  }
  static __m512 zeros(const WeightMat&, int64_t, int64_t) { return _mm512_setzero_ps(); }
  static float post(const WeightMat& m) { return m.global_scale; }
};

// INT4 groups the lanes can follow: 32 and 64 tile a chunk, multiples of 128 hold whole chunks.
inline bool int4_lane_groups(int64_t g) { return g % 128 == 0 || g == 32 || g == 64; }

template <bool kAsym>
struct Int4Lanes {  // fp32 scale (and uint8 zero, asym) per group; lane i reads group (128k + 8i) / group
  static constexpr bool kZero = kAsym;
  // First group of chunk k; no division on the hot path (a 64-bit divide per row and chunk is slow).
  static int64_t first(const WeightMat& m, int64_t k) {
    switch (m.group) {
      case 32: return k << 2;
      case 64: return k << 1;
      case 128: return k;
      case 256: return k >> 1;
      default: return 128 * k / m.group;
    }
  }
  static __mmask16 mask(const WeightMat& m, int64_t k) {  // the chunk's groups that exist
    const int64_t n = std::min<int64_t>(128 / m.group, m.scale_stride - first(m, k));
    return static_cast<__mmask16>((1u << n) - 1);
  }
  static __m512i lanes(const WeightMat& m) {
    return _mm512_srli_epi32(_mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120),
                             m.group == 32 ? 5 : 6);
  }
  static __m512 scales(const WeightMat& m, int64_t row, int64_t k) {
    const float* s = static_cast<const float*>(m.scale) + row * m.scale_stride + first(m, k);
    if (m.group >= 128) return _mm512_set1_ps(*s);
    return _mm512_permutexvar_ps(lanes(m), _mm512_maskz_loadu_ps(mask(m, k), s));
  }
  static __m512 zeros(const WeightMat& m, int64_t row, int64_t k) {
    const uint8_t* z = m.zero + row * m.scale_stride + first(m, k);
    if (m.group >= 128) return _mm512_set1_ps(static_cast<float>(*z));
    const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask(m, k), z)));
    return _mm512_permutexvar_ps(lanes(m), v);
  }
  static float post(const WeightMat&) { return 1.f; }
};

}  // namespace avx512_nib
}  // namespace ft
