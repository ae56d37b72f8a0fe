// AVX-512 BF16: the decoders of the 8-bit X16 formats (INT8_SYM_X16, FP8_E4M3_X16; cpu/formats.h) into bf16 column
// pairs with rows in the lanes: ScaledX16's (x86_avx512bf16_x16.h) in x86_avx512bf16_bytex16.cpp, and the AMX tile
// kernels' (x86_amx_x16.cpp). Included by files compiled with AVX-512 F/BW/VL/DQ/BF16 and F16C.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_avx512_q4kx16.h"  // x16_group_scales
#include "cpu/formats.h"                 // e4m3_to_f32, f32_to_bf16

namespace ft {
namespace {

// ScaledX16's decoders of the 8-bit formats: a load is 4 columns of the 16 rows; a word's low byte gives the pair
// (4p, 4p + 2), its high byte (4p + 1, 4p + 3) -- x's dword p % 2 or p % 2 + 2 of its group of 8 columns.
template <int kParts>  // bf16 parts a weight
struct Bytes {
  static constexpr int kLoads = 8, kWords = 2 * kParts;
  static constexpr int side(int nt) { return nt <= 2 ? 2 : 1; }
  static constexpr int chains(int nt) { return nt == 1 ? 4 : nt <= 4 ? 2 : 1; }  // 6-8 in flight
  static constexpr int x_at(int p, int k) { return 8 * (p / 2) + 2 * (p % 2 + 2 * (k / kParts)); }
  static __m512 scales(const WeightMat& m, int64_t r, int64_t j) { return x16_group_scales(m, r, j); }
};

struct Int8Parts : Bytes<2> {  // q = (128 + l) + (-128 - 128 h): two parts a column pair
  // the bf16 words of the pair (low byte: columns 4p, 4p + 2; high: 4p + 1, 4p + 3) of the 64 bytes v
  void decode(__m512i v, __m512bh (&w)[4]) const {
    const __m512i low = _mm512_set1_epi16(0x007f), sign = _mm512_set1_epi16(0x0080), pos = _mm512_set1_epi16(0x4300),
                  neg = _mm512_set1_epi16(static_cast<short>(0xc300));  // bf16 128 and -128
    const __m512i v8 = _mm512_srli_epi16(v, 8);
    w[0] = (__m512bh)_mm512_ternarylogic_epi32(v, low, pos, 0xea);
    w[1] = (__m512bh)_mm512_ternarylogic_epi32(v, sign, neg, 0xea);
    w[2] = (__m512bh)_mm512_ternarylogic_epi32(v8, low, pos, 0xea);
    w[3] = (__m512bh)_mm512_ternarylogic_epi32(v8, sign, neg, 0xea);
  }
};

struct Fp8Parts : Bytes<1> {  // e4m3's value in one bf16
  static const uint16_t* table() {  // bf16 of the 128 magnitudes (0x7f: NaN)
    alignas(64) static const struct T {
      uint16_t v[128];
      T() {
        for (int i = 0; i < 128; ++i) v[i] = f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(i)));
      }
    } t;
    return t.v;
  }
  __m512i t[4];  // magnitudes 0..31, 32..63, 64..95, 96..127
  Fp8Parts() {
    const uint16_t* v = table();
    for (int k = 0; k < 4; ++k) t[k] = _mm512_loadu_si512(v + 32 * k);
  }
  void decode(__m512i v, __m512bh (&w)[2]) const {
    const __m512i v8 = _mm512_srli_epi16(v, 8), sgn = _mm512_set1_epi16(static_cast<short>(0x8000));
    auto mag = [&](__m512i idx, __mmask32 top) {  // idx's low 6 bits, and bit 6 (top) choosing the table half
      return _mm512_mask_blend_epi16(top, _mm512_permutex2var_epi16(t[0], idx, t[1]),
                                     _mm512_permutex2var_epi16(t[2], idx, t[3]));
    };
    const __m512i lo = mag(v, _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x0040))),
                  hi = mag(v8, _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x4000)));
    w[0] = (__m512bh)_mm512_ternarylogic_epi32(lo, _mm512_slli_epi16(v, 8), sgn, 0xf8);  // lo | (v << 8 & 0x8000)
    w[1] = (__m512bh)_mm512_ternarylogic_epi32(hi, v, sgn, 0xf8);                       // hi | (v & 0x8000)
  }
};

}  // namespace
}  // namespace ft
