// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for MXFP4_X16 (MXFP4 with 16 rows interleaved, GGUF MXFP4_MOE's
// and gpt-oss's experts, cpu/formats.h): rows in the lanes (x86_avx2_x16.h), for a bf16 engine on CPUs without a
// bf16 dot product (Zen 2/3, Intel desktops), where MXFP4 took fp32 products before (a table lookup to fp32 and FMAs:
// compute-bound from 4 tokens).
//
// e2m1 values times 2 are the integers 0, +-1, +-2, +-3, +-4, +-6, +-8, +-12, so a block's products with x's 16-bit
// codes are exact in int32: the decoder (X16E2m1) gives each weight as 2 e2m1 + 12 (0..24, so that a byte-to-word
// step is a mask or a shift), and x16_dot_block sums a block of 8 rows in int32 exactly (|sum| < 32 * 24 * 2^15 <
// 2^25: its conversion to fp32 rounds at most once, by <= 2^-24 of it). The row's e8m0 scale 2^(e - 127) times dx / 2
// then takes the block in one FMA and the offset 12 (6 sx: dx times x's sum of codes, times 6) in one more: both
// scales are powers of two, exact bar under- or overflow.
//
// Per 256 weights (8 rows, one block) and token: 16 `vpmaddwd` and 16 `vpaddd` after 4 loads, 20 shuffles, shifts
// and masks and 16 dword broadcasts (shared by the two halves up to 2 tokens), and 2 FMAs.
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_avx2_x16.h"  // x16_rows_i16, BlockScaledX16, X16E2m1

namespace ft {
namespace {

struct Mxfp4Scales {
  using Dec = X16E2m1;  // codes 2 e2m1 + 12, 0..24
  static constexpr float kMul = 0.5f, kOff = 6.f;
  // 2^(e - 127) of rows r + 8h..+7 for block j, from their e8m0 bytes (e = 0: 2^-127, a subnormal; 255: Inf).
  static __m256 scales(const WeightMat& m, int64_t r, int64_t j, int h) {
    const uint8_t* e = static_cast<const uint8_t*>(m.scale) + nib_x16_scale_at(m.scale_stride, r, j) + 8 * h;
    const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e))), 23);
    return _mm256_castsi256_ps(_mm256_max_epu32(bits, _mm256_set1_epi32(0x00400000)));
  }
};

}  // namespace

void FT_X16_NAME(rows_q16_mxfp4x16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<BlockScaledX16<Mxfp4Scales>>(m, r0, r1, x, Y, ldy);
}
void FT_X16_NAME(rows_q8_mxfp4x16)(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  x16_rows_i8<BlockScaledX16<Mxfp4Scales>>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
