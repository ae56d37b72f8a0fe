// x86 (SSSE3 and up; F16C for f16_at): the 6-bit (scale, min) fields of a Q4_K / Q5_K block as 16 bytes (and Q3_K's scales,
// and those of the X16 tiles' 16 rows), shared by the AVX2 and AVX-512 K-quant kernels (x86_avx2_q8kquant.cpp,
// x86_avx2_q4kx16.cpp, x86_avx512_kq_scales.h, x86_avx512_q4kx16.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace ft {
namespace {

// The little-endian f16 at p as fp32 (F16C: every includer is built with it).
inline float f16_at(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// Bytes 0..7: the scales of sub-blocks 0..7, bytes 8..15 their mins (kquant_scale_min's values). The fields are
// cut in one xmm: bytes 0..3 of the 12 are scales 0..3 (low 6 bits) and the high 2 bits of scales 4..7, bytes
// 4..7 the same for the mins, bytes 8..11 the low 4 bits of scales 4..7 (low nibble) and mins 4..7 (high
// nibble). Reads 16 bytes from b + 4: the block goes on past its scales.
inline __m128i kq_fields6(const uint8_t* b) {
  const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
  // a: scale bytes 0..3, 8..11, mins 4..7, 8..11; h: the bytes whose top 2 bits are fields 4..7's bits 4-5
  const __m128i a = _mm_shuffle_epi8(s, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i h = _mm_shuffle_epi8(s, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i lo = _mm_or_si128(
      _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)),
      _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
  return _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(h, 2), _mm_set1_epi8(0x30)));
}

// A Q4_K_X16 / Q5_K_X16 tile's (cpu/formats.h) 6-bit (sc, m) of sub-blocks j and j + 4 (j < 4) of its 16 rows, a
// byte a row: from the tile's 12 byte planes P (byte k of row i at P[16k + i]; llama.cpp's 6-bit packing, per byte).
inline void x16_fields6(const uint8_t* P, int j, __m128i& sc0, __m128i& mn0, __m128i& sc1, __m128i& mn1) {
  auto ld = [&](int k) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(P + 16 * k)); };
  const __m128i a = ld(j), b = ld(j + 4), c = ld(j + 8), m63 = _mm_set1_epi8(63), m15 = _mm_set1_epi8(15),
                top = _mm_set1_epi8(static_cast<char>(0xc0));
  sc0 = _mm_and_si128(a, m63);
  mn0 = _mm_and_si128(b, m63);
  sc1 = _mm_or_si128(_mm_and_si128(c, m15), _mm_srli_epi16(_mm_and_si128(a, top), 2));
  mn1 = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(c, 4), m15), _mm_srli_epi16(_mm_and_si128(b, top), 2));
}

// Q3_K: the 16 6-bit scales (q3k_scale's values 0..63, before the - 32) of a block as 16 bytes: scale k's low
// nibble is nibble k / 8 of byte 96 + k % 8, its high 2 bits bits 2 (k / 4) of byte 104 + k % 4. Reads the block's
// bytes 94..109 (not past its end); needs AVX2 (vpsrlvd).
inline __m128i q3k_scales16(const uint8_t* b) {
  const __m128i s = _mm_srli_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 94)), 2);  // bytes 96..
  const __m128i m4 = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(s, m4), _mm_and_si128(_mm_srli_epi16(s, 4), m4));
  // dword i of the high bits: bytes 104..107 shifted right by 2i, so byte j of it holds scale 4i + j's bits
  const __m128i h = _mm_srlv_epi32(_mm_shuffle_epi32(s, 0xaa), _mm_setr_epi32(0, 2, 4, 6));
  return _mm_or_si128(lo, _mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi8(3)), 4));
}

// A Q3_K_X16 tile's (cpu/formats.h) 6-bit scales (0..63, before the - 32) of sub-block j (0..15) of its 16 rows, a
// byte a row: sc_j's low 4 bits in nibble j / 8 of byte plane j % 8, its high 2 bits at bit 2 (j / 4) of plane
// 8 + j % 4 (the planes of 16 rows at P + 16k: the tile's 1536).
inline __m128i x16_q3_scales6(const uint8_t* P, int j) {
  auto ld = [&](int k) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(P + 16 * k)); };
  const __m128i a = ld(j % 8), b = ld(8 + j % 4);
  const __m128i lo = _mm_and_si128(j < 8 ? a : _mm_srli_epi16(a, 4), _mm_set1_epi8(15));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 2 * (j / 4)), _mm_set1_epi8(3));
  return _mm_or_si128(lo, _mm_slli_epi16(hi, 4));
}

}  // namespace
}  // namespace ft
