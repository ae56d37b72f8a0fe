// AVX-512 BF16, bf16 activations (cpu/bf16act.h) for the 4-bit X16 formats (MXFP4_X16, INT4_SYM_X16: 16 rows
// interleaved, cpu/formats.h): rows in the lanes.
//
// The row-wise kernel (x86_avx512bf16_lut4.h) puts columns in the lanes: per 128 weights it builds a lane-wise scale
// vector from 4 scales, adds two dot-product chains and scales them, and every row ends in a horizontal sum. Here
// lane i is row i of the group, so a block's 16 scales are one vector. One 64-byte load is 8 columns of 16
// rows, in Q4_K_X16's nibble order (word 2i: row i's columns 8p + {0, 4, 1, 5}, word 2i + 1: 8p + {2, 6, 3, 7});
// `vpermw` reads only the low 5 bits of each word, so (word >> 4k) indexes a 32-entry table (the 16 code values as
// bf16, twice: e2m1's, or q - 8) directly, and `vdpbf16ps` takes x's matching column pair as one dword broadcast (x16_prep's order).
// Per 512 weights (one block of 16 rows) and token: 16 `vdpbf16ps`, after 12 shifts and 16 lookups shared by the
// tile's tokens; then one FMA with the block's scales (16 e8m0 bytes, or 16 fp32 of the block's group). Blocks run side by side, with 1-2 chains each, so a token
// has 8 (1, 2 tokens), 4 (3, 4 tokens) or 1 (8 tokens) dot-product chains in flight (Nib4::side, Nib4::chains).
//
// Every code value is exact in bf16 and each product with a bf16 x exact in fp32, so the result differs from the
// row-wise kernel's only in fp32 summation order (MXFP4's power-of-two scale is exact bar under- or overflow; INT4's
// fp32 scale is applied to the block's sum, as the row-wise kernel applies it to its lanes' sums). One Zen 4
// core, [73728, 2048] from DRAM (a standalone loop, T = 1): ~45 GMAC/s against ~32 for the row-wise kernel; in L2 ~50.
#include <immintrin.h>

#include "cpu/arch/x86_avx512bf16_nib4.h"  // Nib4, Mxfp4, Int4Sym
#include "cpu/arch/x86_avx512bf16_x16.h"   // x16_rows, ScaledX16

namespace ft {

void rows_bf16act_mxfp4x16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                      int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<ScaledX16<Nib4<Mxfp4>>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

void rows_bf16act_int4x16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                     int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<ScaledX16<Nib4<Int4Sym>>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
