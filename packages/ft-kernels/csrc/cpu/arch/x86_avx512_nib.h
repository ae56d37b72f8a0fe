// AVX-512: per-lane scales of the 4-bit nibble formats over chunks of 128 columns, shared by the fp32 table
// kernel (x86_avx512_lut4.h) and the int8 VNNI kernel (x86_avx512vnni_q8.cpp). In both, lane i of chunk k
// covers the 8 columns 128k + 8i .. 128k + 8i + 7, which lie in one scale block (MXFP4: 32 columns, NVFP4: 16,
// INT4: a group of 32, 64 or 128k columns); scales(m, row, k) spreads each block's scale over its lanes.
// Lanes past the matrix get what a zero scale byte decodes to (their weights are code 0, their x 0). lut() is
// the format's 16 code values (zero point aside) as fp32. Included only by x86_avx512*.cpp files.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/formats.h"

namespace ft {
namespace avx512_nib {
namespace {  // internal linkage: each SIMD file its own copy, built with its flags

inline int64_t chunks(int64_t cols) { return (cols + 127) / 128; }  // chunks of 128 columns, the last partial

// The n <= sizeof(U) bytes at s (fewer only at a row's end: nothing past it is read) as a little-endian U.
template <class U>
inline U le_bytes(const uint8_t* s, int64_t n) {
  U u = 0;
  if (n >= static_cast<int64_t>(sizeof(U)))
    std::memcpy(&u, s, sizeof(U));
  else
    for (int64_t i = 0; i < n; ++i) u |= static_cast<U>(s[i]) << (8 * i);
  return u;
}

// The e2m1 codes' values (MXFP4, NVFP4): code c in lane c.
inline __m512 e2m1_lut() {
  return _mm512_setr_ps(0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f);
}

struct Mxfp4Lanes {  // e8m0 per 32 columns: 2^(s - 127) is s in the fp32 exponent field (s = 0: 2^-127, subnormal)
  static constexpr bool kZero = false;
  static constexpr int kScaleBytes = 1;
  static __m512 lut() { return e2m1_lut(); }
  static __m512 scales(const WeightMat& m, int64_t row, int64_t k) {
    const uint8_t* s = static_cast<const uint8_t*>(m.scale) + row * m.scale_stride + 4 * k;
    const uint32_t u = le_bytes<uint32_t>(s, m.scale_stride - 4 * k);  // the chunk's 4 blocks (fewer at the end)
    const __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(u)),
                                       _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    const __m512i e = _mm512_slli_epi32(_mm512_cvtepu8_epi32(b), 23);
    return _mm512_castsi512_ps(
        _mm512_mask_mov_epi32(e, _mm512_testn_epi32_mask(e, e), _mm512_set1_epi32(0x00400000)));
  }
  static __m512 zeros(const WeightMat&, int64_t, int64_t) { return _mm512_setzero_ps(); }
  static float post(const WeightMat&) { return 1.f; }
  static float sub_scale(const WeightMat& m, int64_t row, int64_t s) {  // of columns 32s .. 32s + 31
    const uint32_t e = static_cast<const uint8_t*>(m.scale)[row * m.scale_stride + s];
    return f32_from_bits(e ? e << 23 : 0x00400000u);
  }
};

struct Nvfp4Lanes {  // e4m3 per 16 columns (each byte spread over a lane pair), times the global scale
  static constexpr bool kZero = false;
  static constexpr int kScaleBytes = 1;
  static __m512 lut() { return e2m1_lut(); }
  // e4m3's exponent and mantissa bits placed at fp32's mantissa top (<< 20) are the value times 2^-120, normal
  // or subnormal alike; one exact multiply by 2^120 restores it. 0x7f (NaN) is set apart.
  static __m512 scales(const WeightMat& m, int64_t row, int64_t k) {
    const uint8_t* s = static_cast<const uint8_t*>(m.scale) + row * m.scale_stride + 8 * k;
    const uint64_t u = le_bytes<uint64_t>(s, m.scale_stride - 8 * k);  // the chunk's 8 blocks (fewer at the end)
    const __m128i b = _mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(u)),
                                       _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    const __m512i v = _mm512_cvtepu8_epi32(b), mag = _mm512_and_si512(v, _mm512_set1_epi32(0x7f));
    const __m512i bits = _mm512_or_si512(_mm512_slli_epi32(mag, 20),
                                         _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24));
    const __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
    return _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)), _mm512_set1_ps(__builtin_nanf("")));
  }
  static __m512 zeros(const WeightMat&, int64_t, int64_t) { return _mm512_setzero_ps(); }
  static float post(const WeightMat& m) { return m.global_scale; }
};

// Software prefetch at T = 1, where one row after another streams from DRAM: the kernels prefetch the weight
// bytes kAhead past the chunk they read, and once per row the scale (and zero) bytes of the row that far
// ahead -- a second stream the hardware prefetchers kept too close (one Zen 5 core, [32768, 2048] int4 with
// groups of 32 from DRAM, bf16 x: 13 GB/s with the weights 1 KiB ahead and no scale prefetch, 28-32 with
// both 8 KiB ahead; MXFP4 23 -> 31). Prefetches past the matrix's end are harmless (they never fault).
constexpr int kAhead = 8192;

template <class D>
inline void prefetch_side(const WeightMat& m, int64_t r) {
  const int64_t row = r + kAhead / m.q_stride + 1, n = m.scale_stride * D::kScaleBytes;
  const char* s = static_cast<const char*>(m.scale) + row * n;
  for (int64_t i = 0; i < n; i += 64) _mm_prefetch(s + i, _MM_HINT_T0);
  if (D::kZero) _mm_prefetch(reinterpret_cast<const char*>(m.zero + row * m.scale_stride), _MM_HINT_T0);
}

// kG: the group when it is 32, 64 or 128 (so no division, and no mask but in a row's last chunk, on the hot
// path), 0 for any other multiple of 128 (a division per chunk). with_int4_lanes picks it from m.group.
template <bool kAsym, int kG>
struct Int4Lanes {  // fp32 scale (and uint8 zero, asym) per group; lane i reads group (128k + 8i) / group
  static constexpr bool kZero = kAsym;
  static constexpr int kScaleBytes = 4;
  static __m512 lut() {  // q (zero * sum(x) subtracted per lane) or q - 8
    const __m512 q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return kAsym ? q : _mm512_sub_ps(q, _mm512_set1_ps(8.f));
  }
  static int64_t first(const WeightMat& m, int64_t k) {  // first group of chunk k
    if (kG == 32) return k << 2;
    if (kG == 64) return k << 1;
    if (kG == 128) return k;
    return k / (m.group / 128);
  }
  static __mmask16 mask(const WeightMat& m, int64_t k) {  // the chunk's groups that exist (kG 32 / 64)
    constexpr int64_t n = 128 / (kG ? kG : 128);
    const int64_t left = m.scale_stride - first(m, k);
    return left >= n ? static_cast<__mmask16>((1u << n) - 1) : static_cast<__mmask16>((1u << left) - 1);
  }
  static __m512i lanes() {  // lane i -> group (8i) / kG of the chunk
    return _mm512_srli_epi32(_mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120),
                             kG == 32 ? 5 : 6);
  }
  static __m512 scales(const WeightMat& m, int64_t row, int64_t k) {
    const float* s = static_cast<const float*>(m.scale) + row * m.scale_stride + first(m, k);
    if (kG != 32 && kG != 64) return _mm512_set1_ps(*s);
    return _mm512_permutexvar_ps(lanes(), _mm512_maskz_loadu_ps(mask(m, k), s));
  }
  static __m512 zeros(const WeightMat& m, int64_t row, int64_t k) {
    const uint8_t* z = m.zero + row * m.scale_stride + first(m, k);
    if (kG != 32 && kG != 64) return _mm512_set1_ps(static_cast<float>(*z));
    const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask(m, k), z)));
    return _mm512_permutexvar_ps(lanes(), v);
  }
  static float post(const WeightMat&) { return 1.f; }
  static float sub_scale(const WeightMat& m, int64_t row, int64_t s) {  // of columns 32s .. 32s + 31
    return static_cast<const float*>(m.scale)[row * m.scale_stride + (kG ? 32 * s / kG : 32 * s / m.group)];
  }
};

// f(Int4Lanes<kAsym, G>{}) for m's group (int4_lane_groups(m.group) holds).
template <template <bool, int> class L, class F>
inline void with_int4_lanes(const WeightMat& m, F&& f) {
  const bool asym = m.fmt == Fmt::INT4_ASYM;
  switch (m.group) {
    case 32: asym ? f(L<true, 32>{}) : f(L<false, 32>{}); break;
    case 64: asym ? f(L<true, 64>{}) : f(L<false, 64>{}); break;
    case 128: asym ? f(L<true, 128>{}) : f(L<false, 128>{}); break;
    default: asym ? f(L<true, 0>{}) : f(L<false, 0>{}); break;
  }
}

}  // namespace
}  // namespace avx512_nib
}  // namespace ft
