// AVX-512 BF16: the decoders of the 4-bit X16 formats (MXFP4_X16, INT4_SYM_X16; cpu/formats.h) into bf16 column
// pairs with rows in the lanes: ScaledX16's (x86_avx512bf16_x16.h) in x86_avx512bf16_nibx16.cpp, and the AMX tile
// kernels' (x86_amx_x16.cpp), which also read Q4_K_X16's nibbles through them. Included by files compiled with
// AVX-512 F/BW/VL/DQ/BF16 and F16C.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/rows_common.h"         // FT_UNROLL
#include "cpu/arch/x86_avx512_nib.h"      // e2m1_lut
#include "cpu/arch/x86_avx512_q4kx16.h"   // x16_group_scales
#include "cpu/formats.h"

namespace ft {
namespace {

struct Mxfp4 {  // e8m0 per block: 16 rows' bytes -> 2^(e - 127) in fp32 (e = 0: 2^-127, subnormal)
  static __m512 lut() { return avx512_nib::e2m1_lut(); }
  static __m512 scales(const WeightMat& m, int64_t r, int64_t j) {
    const uint8_t* s = static_cast<const uint8_t*>(m.scale) + nib_x16_scale_at(m.scale_stride, r, j);
    const __m512i e = _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))), 23);
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(e, _mm512_testn_epi32_mask(e, e), _mm512_set1_epi32(0x00400000)));
  }
};

struct Codes4 {  // the codes themselves, 0..15 (Q4_K's q: the AMX Q4_K_X16 decoder); no scales of their own
  static __m512 lut() {
    return _mm512_cvtepi32_ps(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
};

struct Int4Sym {  // q - 8, fp32 scales per group (a multiple of 32 columns)
  static __m512 lut() { return _mm512_sub_ps(Codes4::lut(), _mm512_set1_ps(8.f)); }
  static __m512 scales(const WeightMat& m, int64_t r, int64_t j) { return x16_group_scales(m, r, j); }
};

// ScaledX16's decoder for a 4-bit format F (its code values F::lut(), its scales F::scales): a load is 8 columns of
// the 16 rows, nibble k of every word looked up by (word >> 4k).
template <class F>
struct Nib4 {
  static constexpr int kLoads = 4, kWords = 4;
  // Dot-product chains: 8 a token at 1 and 2 tokens, 4 at 3 and 4 (12 / 16 in all; they had 1 block with 1 chain, 3 /
  // 4 in all: one Zen 5 core, 3 / 4 tokens, [131072, 2048] from DRAM, MXFP4_X16 27.5 / 20.3 -> 30.2 / 23.8 GB/s,
  // INT4_SYM_X16 26.7 / 18.9 -> 27.8 / 22.5; the loop alone in L1 31 / 23 -> 38 / 30). 2 tokens with 4 blocks (16
  // chains) ran faster in L1 (50 -> 58 GB/s) but slower from DRAM (38 -> 36.4), so they keep 2.
  static constexpr int side(int nt) { return nt == 1 ? 4 : nt <= 4 ? 2 : 1; }
  static constexpr int chains(int nt) { return nt <= 4 ? 2 : 1; }
  static constexpr int x_at(int p, int k) { return 8 * p + 2 * k; }
  static __m512 scales(const WeightMat& m, int64_t r, int64_t j) { return F::scales(m, r, j); }
  __m512i lut;  // the 16 values twice: vpermw reads 5 index bits
  Nib4() {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(F::lut());
    lut = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
  }
  void decode(__m512i v, __m512bh (&w)[4]) const {
    FT_UNROLL for (int k = 0; k < 4; ++k) w[k] = (__m512bh)_mm512_permutexvar_epi16(k ? _mm512_srli_epi16(v, 4 * k) : v, lut);
  }
};

}  // namespace
}  // namespace ft
