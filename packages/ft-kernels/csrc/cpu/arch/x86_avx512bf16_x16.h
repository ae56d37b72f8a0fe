// AVX-512 BF16: what the rows-in-lanes bf16-activation kernels of the X16 formats (cpu/formats.h; Q4_K_X16 and
// Q5_K_X16 in x86_avx512bf16_q4kx16.cpp, Q6_K_X16 in x86_avx512bf16_q6kx16.cpp, Q3_K_X16 in x86_avx512bf16_q3kx16.cpp,
// MXFP4_X16 and INT4_SYM_X16 in x86_avx512bf16_nibx16.cpp, INT8_SYM_X16 and FP8_E4M3_X16 in
// x86_avx512bf16_bytex16.cpp) share: x put in their column order, the loop over tiles of tokens and groups of 16 rows,
// (ScaledX16) the block loop of the formats with scales of their own, and (Sub16X16) the sub-block loop of the
// K-quants with a scale per 16 columns. Included by files compiled with AVX-512 F/BW/VL/DQ/BF16 and F16C.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/rows_common.h"  // FloatBuf, u16_buf
#include "cpu/arch/x86_avx512_q4kx16.h"  // x16_group_scales
#include "cpu/arch/x86_x16_prefetch.h"   // x16_prefetch
#include "cpu/bf16act.h"
#include "cpu/dispatch.h"  // rows_scalar

namespace ft {
namespace {

constexpr int kX16Tokens = 8;  // tokens a tile at most (then 4, 3, 2, 1)
// Software prefetch of the (single, sequential) tile stream: kX16Ahead bytes ahead, into L2 (x16_prefetch: or non-
// temporally into L1, on Zen 5). One Zen 4 core, T = 1, Q4_K experts of Qwen3-30B-A3B shape from DRAM: 4096 ahead into
// L1 13-14 GB/s, into L2 13; 8192 into L2 19, 16384 20, 24576 21 (but 12288 and 32768 11: keep to the measured ones).
// The distance comes from another file (bf16act.cpp: x16_prefetch_bytes) at load: built in as a constant, or passed
// down as an argument, the Q4_K_X16 kernel ran at 8-10 GB/s instead of 19-23 on a Zen 4 VM (the Q6_K_X16 one at 23-25
// either way), in repeated interleaved runs, for a reason not found in the generated code.
static const int kX16Ahead = x16_prefetch_bytes();

// x of nt tokens in the kernels' order, xo[t * ldo + 8 g + u] = X[t, 8 g + {0, 2, 4, 6, 1, 3, 5, 7}[u]] (dword k of
// a group of 8: the column pair of nibble k in the tiles' words), and, where xs is given, xs[t * cols / 32 + j] =
// the fp32 sum of X[t] over columns 32j..32j+31 (`vdpbf16ps` against ones: exact products).
inline void x16_prep(const uint16_t* X, int64_t ldx, int nt, int64_t cols, uint16_t* xo, int64_t ldo, float* xs) {
  alignas(64) uint16_t v[32];
  for (int w = 0; w < 32; ++w) v[w] = static_cast<uint16_t>(8 * (w / 8) + (w % 4) * 2 + (w % 8) / 4);
  const __m512i perm = _mm512_load_si512(v);
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int t = 0; t < nt; ++t)
    for (int64_t c = 0; c < cols; c += 32) {
      const __m512i x = _mm512_loadu_si512(X + t * ldx + c);
      _mm512_storeu_si512(xo + t * ldo + c, _mm512_permutexvar_epi16(perm, x));
      if (xs) xs[t * (cols / 32) + c / 32] = _mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), ones, (__m512bh)x));
    }
}

// The kernel of the X16 formats with scales of their own (MXFP4_X16, INT4_SYM_X16: x86_avx512bf16_nibx16.cpp;
// INT8_SYM_X16, FP8_E4M3_X16: x86_avx512bf16_bytex16.cpp), for x16_rows. A block of 32 columns of 16 rows is
// D::kLoads 64-byte loads; d.decode makes each into D::kWords vectors of bf16 column pairs (lane i: row i), and word
// k of load p meets x's dword D::x_at(p, k) of the block (x16_prep's order) in `vdpbf16ps`. D::side(NT) blocks run
// side by side with D::chains(NT) dot-product chains each and token; a block's chains end summed and scaled once by
// D::scales (its 16 rows' scales) into y.
template <class D>
struct ScaledX16 {
  static constexpr bool kSums = false;

  // B blocks from block j of rows r..r+15 (their bytes at q, x per token t at xo + t * ldo), into y.
  template <int NT, int B, int C>
  static void blocks(const D& d, const WeightMat& m, const X16ScaleAhead& sa, int64_t r, int64_t j, const uint8_t* q,
                     const uint16_t* xo, int64_t ldo, __m512 (&y)[NT]) {
    sa.lines(j, B, [](const char* a) { x16_prefetch(a); });
    __m512 acc[B][NT][C];
    FT_UNROLL for (int b = 0; b < B; ++b) FT_UNROLL for (int t = 0; t < NT; ++t) FT_UNROLL for (int c = 0; c < C; ++c)
        acc[b][t][c] = _mm512_setzero_ps();
    FT_UNROLL for (int p = 0; p < D::kLoads; ++p) FT_UNROLL for (int b = 0; b < B; ++b) {
      const uint8_t* v0 = q + 64 * (D::kLoads * b + p);
      x16_prefetch(reinterpret_cast<const char*>(v0) + kX16Ahead);
      __m512bh w[D::kWords];
      d.decode(_mm512_loadu_si512(v0), w);
      FT_UNROLL for (int k = 0; k < D::kWords; ++k) FT_UNROLL for (int t = 0; t < NT; ++t) {
        const __m512bh x =
            (__m512bh)_mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + 32 * b + D::x_at(p, k)));
        __m512& a = acc[b][t][(D::kWords * p + k) % C];
        a = _mm512_dpbf16_ps(a, w[k], x);
      }
    }
    FT_UNROLL for (int b = 0; b < B; ++b) {
      const __m512 s = D::scales(m, r, j + b);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        __m512 a = acc[b][t][0];
        FT_UNROLL for (int c = 1; c < C; ++c) a = _mm512_add_ps(a, acc[b][t][c]);
        y[t] = _mm512_fmadd_ps(a, s, y[t]);
      }
    }
  }

  // Rows r..r+15 of m against NT tokens: Y[t * ldy + i] = row r + i . token t.
  template <int NT>
  static void group(const WeightMat& m, int64_t r, const uint16_t* xo, int64_t ldo, const float*, float* Y, int64_t ldy) {
    constexpr int B = D::side(NT), C = D::chains(NT), kBlock = 64 * D::kLoads;  // bytes of a block of 16 rows
    const int64_t nb = m.cols / 32;
    const uint8_t* q = m.q + r * nb * (kBlock / 16);  // the group's blocks
    const D d{};
    const X16ScaleAhead sa(m, r, kBlock, kX16Ahead);
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + B <= nb; j += B) blocks<NT, B, C>(d, m, sa, r, j, q + kBlock * j, xo + 32 * j, ldo, y);
    for (; j < nb; ++j) blocks<NT, 1, C>(d, m, sa, r, j, q + kBlock * j, xo + 32 * j, ldo, y);
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

// The kernel of the K-quant X16 formats with one scale per sub-block of 16 columns (Q6_K_X16:
// x86_avx512bf16_q6kx16.cpp, Q3_K_X16: x86_avx512bf16_q3kx16.cpp), for x16_rows. Per super-block tile (D::kTile
// bytes; D::d(tile): its 16 rows' f16 d as fp32), d.decode(tile, j, w) makes sub-block j's codes into 8 vectors of
// bf16 column pairs (lane i: row i; pair k meets x's dword 16j + 2k of the super-block, x16_prep's order) and
// D::scale(tile, j, d) its 16 rows' d sc; the chains of a sub-block end summed and scaled once into y. Two
// sub-blocks run side by side for up to 4 tokens, so a token has 8 (1 token), 4 (2) or 2 chains in flight.
template <class D>
struct Sub16X16 {
  static constexpr bool kSums = false;

  // Rows r..r+15 of m (one group of 16: its tiles, one per super-block) against NT tokens: Y[t * ldy + i] = row
  // r + i . token t.
  template <int NT>
  static void group(const WeightMat& m, int64_t r, const uint16_t* xo, int64_t ldo, const float*, float* Y, int64_t ldy) {
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK;
    constexpr int C = NT == 1 ? 4 : NT == 2 ? 2 : 1;  // dot-product chains a token and sub-block
    constexpr int H = NT <= 4 ? 2 : 1;                // sub-blocks in flight: >= 6 chains, within the 32 registers
    const D dec{};
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* tile = g + s * D::kTile;
      const __m512 d = D::d(tile);
      // sub-blocks jb .. jb + H - 1, side by side
      auto step = [&](int jb) __attribute__((always_inline)) {
        __m512 acc[H][NT][C];
        FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) FT_UNROLL for (int c = 0; c < C; ++c)
            acc[h][t][c] = _mm512_setzero_ps();
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const int j = jb + h;
          __m512bh w[8];
          dec.decode(tile, j, w);
          FT_UNROLL for (int k = 0; k < 8; ++k) FT_UNROLL for (int t = 0; t < NT; ++t) {
            const __m512bh x =
                (__m512bh)_mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + kQK * s + 16 * j + 2 * k));
            acc[h][t][k % C] = _mm512_dpbf16_ps(acc[h][t][k % C], w[k], x);
          }
        }
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const __m512 dsc = D::scale(tile, jb + h, d);
          FT_UNROLL for (int t = 0; t < NT; ++t) {
            __m512 a = acc[h][t][0];
            FT_UNROLL for (int c = 1; c < C; ++c) a = _mm512_add_ps(a, acc[h][t][c]);
            y[t] = _mm512_fmadd_ps(a, dsc, y[t]);
          }
        }
      };
      // D::kUnroll: the 16 sub-blocks unrolled (Q3_K_X16: its scales' shifts by constants, 34 against 32 GMAC/s a
      // Zen 4 core at one token) or a loop (Q6_K_X16: 16 copies ran at 15 instead of 27 GB/s, code out of the
      // caches)
      if constexpr (D::kUnroll) {
        FT_UNROLL for (int jb = 0; jb < 16; jb += H) step(jb);
      } else {
        for (int jb = 0; jb < 16; jb += H) step(jb);
      }
    }
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

// Rows [r0, r1) of an X16 matrix m against ntok tokens: tiles of 8, 4, 3, 2, 1 tokens, each over every group of 16
// rows r by K::group<NT>(m, r, xo, ldo, xs, Y, ldy), which writes Y[t * ldy + i] = row r + i . token t. K::kSums:
// whether it needs xs (cols / 32 sums a token). Rows not in whole 16s: the scalar twin, exactly.
template <class K>
inline void x16_rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx, float* Y,
                     int64_t ldy) {
  const int64_t cols = m.cols, nsub = cols / 32, ldo = cols + 32;  // + 32: no 4 KiB aliasing
  thread_local FloatBuf bx, bs;
  if (r0 % 16 || r1 % 16) {  // callers split rows in 16s (linear.cpp, moe_ffn.cpp)
    float* xf = bs.get(ntok * cols);
    for (int64_t t = 0; t < ntok; ++t) bf16_to_f32_n(X + t * ldx, cols, xf + t * cols);
    return rows_scalar(m, r0, r1, xf, ntok, cols, Y, ldy);
  }
  uint16_t* xo = u16_buf(bx, kX16Tokens * ldo);
  float* xs = K::kSums ? bs.get(kX16Tokens * nsub) : nullptr;
  for (int64_t t0 = 0; t0 < ntok;) {
    const int64_t left = ntok - t0;
    const int nt = static_cast<int>(left >= kX16Tokens ? kX16Tokens : left > 4 ? 4 : left);
    x16_prep(X + t0 * ldx, ldx, nt, cols, xo, ldo, xs);
    for (int64_t r = r0; r < r1; r += 16) {
      float* Yr = Y + t0 * ldy + (r - r0);
      switch (nt) {
        case 8: K::template group<8>(m, r, xo, ldo, xs, Yr, ldy); break;
        case 4: K::template group<4>(m, r, xo, ldo, xs, Yr, ldy); break;
        case 3: K::template group<3>(m, r, xo, ldo, xs, Yr, ldy); break;
        case 2: K::template group<2>(m, r, xo, ldo, xs, Yr, ldy); break;
        default: K::template group<1>(m, r, xo, ldo, xs, Yr, ldy); break;
      }
    }
    t0 += nt;
  }
}

}  // namespace
}  // namespace ft
