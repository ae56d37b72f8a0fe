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
#include "cpu/arch/x86_avx512bf16_x16.h"  // x16_rows, x16_fold, kX16Ahead

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
  static __m512 scales(const WeightMat& m, int64_t r, int64_t j) {
    return _mm512_loadu_ps(static_cast<const float*>(m.scale) + nib_x16_scale_at(m.scale_stride, r, 32 * j / m.group));
  }
};

template <class F>
struct NibX16 {
  static constexpr bool kSums = false;

  // B blocks from block j of rows r..r+15 (codes at q, x per token t at xo + t * ldo), C chains each and token,
  // into y.
  template <int NT, int B, int C>
  static void blocks(const WeightMat& m, int64_t r, int64_t j, const uint8_t* q, const uint16_t* xo, int64_t ldo,
                     __m512i lut, __m512 (&y)[NT]) {
    __m512 acc[B][NT][C];
    FT_UNROLL for (int b = 0; b < B; ++b) FT_UNROLL for (int t = 0; t < NT; ++t) FT_UNROLL for (int c = 0; c < C; ++c)
        acc[b][t][c] = _mm512_setzero_ps();
    FT_UNROLL for (int p = 0; p < 4; ++p) FT_UNROLL for (int b = 0; b < B; ++b) {
      const uint8_t* v0 = q + 256 * b + 64 * p;  // columns 32 b + 8p .. + 7 of the 16 rows
      _mm_prefetch(reinterpret_cast<const char*>(v0) + kX16Ahead, _MM_HINT_T1);
      const __m512i v = _mm512_loadu_si512(v0);
      FT_UNROLL for (int k = 0; k < 4; ++k) {
        const __m512bh w = (__m512bh)_mm512_permutexvar_epi16(k ? _mm512_srli_epi16(v, 4 * k) : v, lut);
        FT_UNROLL for (int t = 0; t < NT; ++t) {
          const __m512bh x = (__m512bh)_mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + 32 * b + 8 * p + 2 * k));
          acc[b][t][(4 * p + k) % C] = _mm512_dpbf16_ps(acc[b][t][(4 * p + k) % C], w, x);
        }
      }
    }
    x16_fold(acc, [&](int b) { return F::scales(m, r, j + b); }, y);
  }

  // Rows r..r+15 of m against NT tokens: Y[t * ldy + i] = row r + i . token t.
  template <int NT>
  static void group(const WeightMat& m, int64_t r, const uint16_t* xo, int64_t ldo, const float*, float* Y, int64_t ldy) {
    constexpr int B = NT == 1 ? 4 : NT <= 3 ? 2 : 1;  // blocks side by side
    constexpr int C = NT <= 2 ? 2 : 1;                // chains a block and token: 8 in flight at 1 and 2 tokens
    const int64_t nb = m.cols / 32;
    const uint8_t* q = m.q + r * (m.cols / 2);  // the group's blocks, 256 B each
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(F::lut());
    const __m512i lut = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);  // the 16 values twice: 5 index bits
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + B <= nb; j += B) blocks<NT, B, C>(m, r, j, q + 256 * j, xo + 32 * j, ldo, lut, y);
    for (; j < nb; ++j) blocks<NT, 1, C>(m, r, j, q + 256 * j, xo + 32 * j, ldo, lut, y);
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

}  // namespace

void rows_bf16act_mxfp4x16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                      int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<NibX16<Mxfp4>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

void rows_bf16act_int4x16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                     int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<NibX16<Int4Sym>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
