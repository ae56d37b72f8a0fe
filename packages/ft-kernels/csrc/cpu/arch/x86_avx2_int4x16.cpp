// AVX2, 16-bit activations (cpu/q8.h: Q16Act) for INT4_SYM_X16 (INT4 with 16 rows interleaved, GGUF Q4_0 and
// `ft convert --format int4`, cpu/formats.h): rows in the lanes (x86_avx2_x16.h), for a bf16 engine on CPUs without
// a bf16 dot product.
//
// The row-wise 16-bit kernel (x86_avx2_q16.cpp's int4) scales each row's block on its own: a horizontal fold and a
// conversion per 32 weights. Here a block's exact int32 dots of 8 rows with the codes q (x16_dot_block), less 8
// times x's sum of codes for q - 8, take the rows' scales (one vector: 8 f16 or fp32 values of the group, 16 rows
// a block of the scale array) in two FMAs: s dx * dot - s * 8 sx (dx: the activation block's power-of-two scale, sx:
// dx times its sum of codes). Any group that is a multiple of 32 columns (Q4_0's 32, ft's 128).
//
// Per 256 weights (8 rows, one block) and token: 16 `vpmaddwd` and 16 `vpaddd`, after 4 loads, 12 shifts and masks
// and 16 dword broadcasts (shared by the two halves up to 2 tokens), and 2 FMAs.
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_avx2_x16.h"  // x16_rows_i16, BlockScaledX16, x16_group_scales8

namespace ft {
namespace {

struct Int4Scales {
  using Dec = X16Nib;  // codes q, 0..15
  static constexpr float kMul = 1.f, kOff = 8.f;
  static __m256 scales(const WeightMat& m, int64_t r, int64_t j, int h) { return x16_group_scales8(m, r, j, h); }
};

}  // namespace

void FT_X16_NAME(rows_q16_int4x16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<BlockScaledX16<Int4Scales>>(m, r0, r1, x, Y, ldy);
}
void FT_X16_NAME(rows_q8_int4x16)(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  x16_rows_i8<BlockScaledX16<Int4Scales>>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
