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
// has 8 (1, 2 tokens) or 2-4 dot-product chains in flight.
//
// Every code value is exact in bf16 and each product with a bf16 x exact in fp32, so the result differs from the
// row-wise kernel's only in fp32 summation order (MXFP4's power-of-two scale is exact bar under- or overflow; INT4's
// fp32 scale is applied to the block's sum, as the row-wise kernel applies it to its lanes' sums). One Zen 4
// core, [73728, 2048] from DRAM (a standalone loop, T = 1): ~45 GMAC/s against ~32 for the row-wise kernel; in L2 ~50.
#include <immintrin.h>

#include "cpu/arch/rows_common.h"         // FT_UNROLL
#include "cpu/arch/x86_avx512_nib.h"      // e2m1_lut
#include "cpu/arch/x86_avx512bf16_x16.h"  // x16_rows, ScaledX16, x16_group_scales

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

struct Int4Sym {  // q - 8, fp32 scales per group (a multiple of 32 columns)
  static __m512 lut() {
    return _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
                         _mm512_set1_ps(8.f));
  }
  static __m512 scales(const WeightMat& m, int64_t r, int64_t j) { return x16_group_scales(m, r, j); }
};

// ScaledX16's decoder for a 4-bit format F (its code values F::lut(), its scales F::scales): a load is 8 columns of
// the 16 rows, nibble k of every word looked up by (word >> 4k).
template <class F>
struct Nib4 {
  static constexpr int kLoads = 4, kWords = 4;
  static constexpr int side(int nt) { return nt == 1 ? 4 : nt <= 3 ? 2 : 1; }  // 8 chains a token at 1 and 2 tokens
  static constexpr int chains(int nt) { return nt <= 2 ? 2 : 1; }
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

void rows_bf16act_mxfp4x16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                      int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<ScaledX16<Nib4<Mxfp4>>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

void rows_bf16act_int4x16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                     int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<ScaledX16<Nib4<Int4Sym>>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
