// AMX (Sapphire Rapids and later Xeons): prefill-sized bf16-activation products of row-wise Q6_K weights (GGUF's
// blocks as stored; cpu/formats.h) on the tile unit's `tdpbf16ps`. Q4_K_M files hold their down projections of
// every other layer (and some value projections) in Q6_K, which the 16-bit kernels ran at ~30 GMAC/s a core.
//
// Here the weights are A and x is B (x86_amx_x16.cpp has them the other way round): a row's 32 codes of a block of
// 32 columns become its 32 bf16 (q - 32, exact; one `vpermi2w` over a 64-entry table) in natural column order, which
// is a row of A as it stands, so no transpose of weights is needed; x's 16 tokens are put once a call in B's pair
// layout (row k: column pair k of the 16 tokens). Q6_K scales every 16 columns, so each block is two products of
// K = 16 (A: 16 rows x 32 bytes, B: 8 rows), C[row][token] stored after each and added into the 16 rows' sums
// (one zmm of 16 tokens a row, in registers) with the row's d sc in one FMA. The sums end transposed into Y.
//
// Weights and products are exact in fp32 and the tile unit sums in fp32 (denormals flushed, as `vdpbf16ps`), so
// results differ from the other kernels' only in fp32 rounding: no split of the weight (Q6_K terms |W|).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf, u16_buf
#include "cpu/arch/x86_amx.h"       // tiles_configure
#include "cpu/formats.h"         // WeightMat, f16_to_f32

namespace ft {
namespace {

// Tiles: C of a block's two sub-blocks (0, 1; the next block's 2, 3); A of their weights (4, 5: 16 rows x 16
// columns); B of their x (6, 7: 8 column pairs x 16 tokens).
inline void tiles_configure() {
  static constexpr uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 8, 8};
  static constexpr uint16_t colsb[8] = {64, 64, 64, 64, 32, 32, 64, 64};
  tiles_configure(8, rows, colsb);
}

constexpr int64_t kBlock = 210;  // bytes of a Q6_K super-block

// x of up to 16 tokens (the rest zeros) in B's layout: xp[512 j + 32 k + 2 t + h] = X[t, 32 j + 2 k + h] for
// blocks j of 32 columns, pairs k < 16, tokens t < 16.
inline void pairs_prep(const uint16_t* X, int64_t ldx, int nt, int64_t cols, uint16_t* xs, uint16_t* xp) {
  for (int t = 0; t < 16; ++t) {
    if (t < nt)
      std::memcpy(xs + t * cols, X + t * ldx, sizeof(uint16_t) * cols);
    else
      std::memset(xs + t * cols, 0, sizeof(uint16_t) * cols);
  }
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(cols / 2)));
  const int32_t* x32 = reinterpret_cast<const int32_t*>(xs);
  for (int64_t p = 0; p < cols / 2; ++p)  // column pair p of the 16 tokens
    _mm512_storeu_si512(xp + 32 * p, _mm512_i32gather_epi32(idx, x32 + p, 4));
}

// bf16(c - 32) for the codes c of a table half (c0 = 0: -32..-1; c0 = 32: 0..31), for `vpermi2w`.
inline __m512i q6_table(int c0) {
  const __m512i i = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_add_epi32(i, _mm512_set1_epi32(c0 - 32)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_add_epi32(i, _mm512_set1_epi32(c0 - 16)));
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// GCC's tile intrinsics paste their tile numbers into the assembly: literals only, hence these. Set S (of two
// alternating blocks): C tiles 2 S (first 16 columns) and 2 S + 1 (the next 16).
template <int S>
inline void q6_dot(const uint16_t* a, const uint16_t* xb) {
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a + 16, 64);
  _tile_loadd(6, xb, 64);
  _tile_loadd(7, xb + 256, 64);
  if constexpr (S == 0) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 5, 7);
  } else {
    _tile_zero(2);
    _tile_zero(3);
    _tile_dpbf16ps(2, 4, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}
template <int S>
inline void q6_store(float* c) {
  if constexpr (S == 0) {
    _tile_stored(0, c, 64);
    _tile_stored(1, c + 256, 64);
  } else {
    _tile_stored(2, c, 64);
    _tile_stored(3, c + 256, 64);
  }
}

// Rows r..r+nr-1 (nr <= 16) of m against 16 tokens (xp: pairs_prep's), into y[i * 16 + t] = row r + i . token t
// (rows past nr repeat the last one). A pipeline over the blocks of 32 columns: block J is decoded and its products
// started while J - 1's are stored and J - 2's scaled into the sums (a tile store read back at once waits for it).
void q6k_group(const WeightMat& m, int64_t r, int nr, const uint16_t* xp, float* y) {
  alignas(64) uint16_t a[2][16 * 32];  // A: row i's 32 bf16 at 32 i (the first 16 columns, then the rest)
  alignas(64) float c[3][512];         // C of a block: its first 16 columns' [row][token], then the rest's
  alignas(64) float dsc[2][16][16];    // d sc of two super-blocks: row, sub-block of 16 columns
  const __m512i t_lo = q6_table(0), t_hi = q6_table(32);
  const __m256i lo_mask = _mm256_set1_epi8(0x0f), hi_mask = _mm256_set1_epi8(0x03);
  __m512 acc[16];
  FT_UNROLL for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  const uint8_t* row[16];  // the rows' first super-blocks
  for (int i = 0; i < 16; ++i) row[i] = m.q + (r + (i < nr ? i : nr - 1)) * m.q_stride;
  auto scale = [&](int64_t J) {  // block J's products into the sums
    const float* cj = c[J % 3];
    const float(*d)[16] = dsc[(J / 8) % 2];
    const int u = static_cast<int>(J % 8);
    FT_UNROLL for (int i = 0; i < 16; ++i) {
      acc[i] = _mm512_fmadd_ps(_mm512_load_ps(cj + 16 * i), _mm512_set1_ps(d[i][2 * u]), acc[i]);
      acc[i] = _mm512_fmadd_ps(_mm512_load_ps(cj + 256 + 16 * i), _mm512_set1_ps(d[i][2 * u + 1]), acc[i]);
    }
  };
  const int64_t nb = m.cols / 32;
  for (int64_t J = 0; J < nb; ++J) {
    const int64_t s = J / 8;
    const int n = static_cast<int>(J % 8) / 4, e = static_cast<int>(J % 4);  // half n of the super-block, quarter e
    if (J % 8 == 0)
      for (int i = 0; i < 16; ++i) {
        const uint8_t* b = row[i] + s * kBlock;
        uint16_t dh;
        std::memcpy(&dh, b + 208, 2);
        const __m512 sc =
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
        _mm512_store_ps(dsc[s % 2][i], _mm512_mul_ps(sc, _mm512_set1_ps(f16_to_f32(dh))));
      }
    uint16_t* aj = a[J % 2];
    for (int i = 0; i < 16; ++i) {
      const uint8_t* b = row[i] + s * kBlock;
      const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n + 32 * (e & 1)));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * n));
      const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (e >> 1)), lo_mask);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * e), hi_mask);
      const __m512i code = _mm512_cvtepu8_epi16(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)));
      _mm512_store_si512(aj + 32 * i, _mm512_permutex2var_epi16(t_lo, code, t_hi));
    }
    const uint16_t* xb = xp + 512 * J;
    if (J % 2 == 0) {
      q6_dot<0>(aj, xb);
      if (J >= 1) q6_store<1>(c[(J - 1) % 3]);
    } else {
      q6_dot<1>(aj, xb);
      q6_store<0>(c[(J - 1) % 3]);
    }
    if (J >= 2) scale(J - 2);
  }
  if (nb % 2) q6_store<0>(c[(nb - 1) % 3]);  // the last block's set: 0 for an odd count
  else q6_store<1>(c[(nb - 1) % 3]);
  if (nb >= 2) scale(nb - 2);
  scale(nb - 1);
  FT_UNROLL for (int i = 0; i < 16; ++i) _mm512_store_ps(y + 16 * i, acc[i]);
}

}  // namespace

// Rows [r0, r1) of a Q6_K matrix against ntok bf16 tokens: tiles of 16 tokens (x in pairs, padded with zero
// tokens), each over the rows in groups of 16 (the last one may be shorter).
void rows_tile_q6k_amx(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                       float* Y, int64_t ldy) {
  const int64_t cols = m.cols;
  thread_local FloatBuf bx, bp;
  uint16_t* xs = u16_buf(bx, 16 * cols);
  uint16_t* xp = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(u16_buf(bp, 16 * cols + 64)) + 63) & ~uintptr_t(63));
  alignas(64) float y[256];
  tiles_configure();
  for (int64_t t0 = 0; t0 < ntok; t0 += 16) {
    const int nt = static_cast<int>(ntok - t0 < 16 ? ntok - t0 : 16);
    pairs_prep(X + t0 * ldx, ldx, nt, cols, xs, xp);
    for (int64_t r = r0; r < r1; r += 16) {
      const int nr = static_cast<int>(r1 - r < 16 ? r1 - r : 16);
      q6k_group(m, r, nr, xp, y);
      for (int t = 0; t < nt; ++t)
        for (int i = 0; i < nr; ++i) Y[(t0 + t) * ldy + (r - r0) + i] = y[16 * i + t];
    }
  }
  _tile_release();
}

}  // namespace ft
