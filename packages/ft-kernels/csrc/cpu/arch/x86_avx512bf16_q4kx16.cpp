// AVX-512 BF16, bf16 activations (cpu/bf16act.h) for Q4_K_X16 and Q5_K_X16 (Q4_K, Q5_K with 16 rows interleaved,
// cpu/formats.h): rows in the lanes.
//
// The row-wise kernel (x86_avx512bf16_kquant.cpp) puts columns in the lanes: per 128 weights it looks up 4 vectors,
// loads 4 x vectors, and every lane mixes two sub-blocks, so 2 scale FMAs follow 4 dot products; then each row
// ends in a horizontal sum. Here lane i is row i of the group. One 64-byte load is 8 columns of 16 rows; read as
// 32 words, word 2i holds row i's columns 8p + {0, 4, 1, 5} (nibbles 0..3) and word 2i + 1 its columns
// 8p + {2, 6, 3, 7}. (word >> 4k) & 15 | 0x4300 (one ternary-logic op after the shift) is the bf16 of 128 + q:
// exact, as is its product with a bf16 x. `vdpbf16ps` takes x's matching column pair (8p + {0, 4, 1, 5}[k],
// + {2, 6, 3, 7}[k]) as one dword broadcast: lane i += w(i, c) x(c) + w(i, c') x(c'). A sub-block of 32 columns is
// 4 loads; its sum in lane i is row i's dot over it with 128 + q, scaled once (d sc_i) with
// -(128 d sc_i + dmin m_i) * sum(x over the sub-block) in one more FMA. The 16 rows' 6-bit scales are unpacked
// from their byte planes once per super-block for all the tile's tokens. Two sub-blocks run side by side, so a
// token has 4 (1 or 2 tokens) or 2 independent dot-product chains in flight.
//
// Per 512 weights and token: 16 `vdpbf16ps`, 2 scale FMAs, after 12 shifts and 16 ternary-logic ops shared by the
// tile's tokens, and no horizontal sums. Codes and bf16 products are exact in fp32; the sums of 128 + q reach
// ~17x the magnitude of the sums of q, so the fp32 rounding bound covers those terms (fp32_bounds.kquant_terms).
// The result differs from the row-wise kernel's only in fp32 rounding. From 4 tokens a tile the kernel is bound by
// `vdpbf16ps` (Zen 4: one zmm a cycle), and it is as fast as the tokens-in-lanes prefill kernel at any token count
// (one core, [1536, 2048] in cache: 4..8 tokens 80-87 GMAC/s, 16..64 tokens 92-97, against 46-55 and 87-93), so
// it serves prefill too.
//
// Q5_K_X16 is Q4_K_X16 with a plane of fifth bits: one 64-byte load of it holds those of a sub-block's 4 nibble
// loads, placed so that for nibble k of load e the bit sits 4 above the nibble once the plane's word is shifted
// down by e (k < 3), or at the bottom of the dword's other word (k = 3). A ternary-logic select (the nibble from
// the codes' word, the rest from the plane's), the shift down by 4k (for k = 3 a dword rotation by 12) and (t &
// 31) | 0x4300 give bf16(128 + q) as for Q4_K: per 512 weights 12 more shifts or rotations, 16 selects and 3
// plane shifts, the same products and scale FMAs.
#include <immintrin.h>

#include "cpu/arch/rows_common.h"        // FT_UNROLL
#include "cpu/arch/x86_avx512_q4kx16.h"  // x16_scale_min, x16_d, x16_dmin
#include "cpu/arch/x86_avx512bf16_x16.h"  // x16_rows, kX16Ahead

namespace ft {
namespace {

// Q4_K_X16 (Q5 false) or Q5_K_X16 (Q5 true: kScales, kD its tile's offsets of the scale planes and of d).
template <bool Q5>
struct KX16 {
  static constexpr bool kSums = true;
  static constexpr int64_t kTileBytes = Q5 ? kX16Q5Tile : kX16Tile, kScales = Q5 ? 2560 : 2048, kD = kScales + 192;

  // Rows r..r+15 of m (one group of 16: its tiles, one per super-block) against NT tokens: Y[t * ldy + i] = row
  // r + i . token t.
  template <int NT>
  static void group(const WeightMat& m, int64_t r, const uint16_t* xo, int64_t ldo, const float* xs, float* Y,
                    int64_t ldy) {
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK, nsub = m.cols / 32;
    constexpr int C = NT <= 2 ? 2 : 1;  // dot-product chains a token and sub-block (8 at one token: 2-7 % slower)
    constexpr int H = NT <= 4 ? 2 : 1;  // sub-blocks in flight: >= 4 chains, within the 32 registers
    const __m512i nib = _mm512_set1_epi16(0x000f), tab = _mm512_set1_epi16(0x4300);  // bf16 128: | q gives 128 + q
    const __m512i five = _mm512_set1_epi16(0x001f), sel[4] = {nib, _mm512_set1_epi16(0x00f0), _mm512_set1_epi16(0x0f00),
                                                              _mm512_set1_epi16(static_cast<short>(0xf000))};
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* tile = g + s * kTileBytes;
      const __m512 d = x16_d(tile, kD), dmin = x16_dmin(tile, kD);
      FT_UNROLL for (int jj = 0; jj < 4; ++jj) {
        __m512 sc[2], mn[2];
        // the tile's 4 lines past its codes and fifth bits (scales, d, dmin): the code loads' prefetches skip them
        x16_prefetch(reinterpret_cast<const char*>(tile + kScales + 64 * jj) + kX16Ahead);
        x16_scale_min(tile + kScales, jj, sc[0], mn[0], sc[1], mn[1]);
        FT_UNROLL for (int hb = 0; hb < 2; hb += H) {  // sub-blocks jj + 4 (hb .. hb + H - 1), side by side
          __m512 acc[H][NT][C];
          FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) FT_UNROLL for (int c = 0; c < C; ++c)
              acc[h][t][c] = _mm512_setzero_ps();
          __m512i plane[H];  // Q5_K: the sub-blocks' fifth bits
          if constexpr (Q5) {
            FT_UNROLL for (int h = 0; h < H; ++h) {
              const uint8_t* f = tile + 2048 + 64 * (jj + 4 * (hb + h));
              x16_prefetch(reinterpret_cast<const char*>(f) + kX16Ahead);
              plane[h] = _mm512_loadu_si512(f);
            }
          }
          FT_UNROLL for (int u = 0; u < 4; ++u) FT_UNROLL for (int h = 0; h < H; ++h) {
            const int p = 4 * (jj + 4 * (hb + h)) + u;  // columns 8p..8p+7 of the super-block
            const uint8_t* q = tile + 64 * p;
            x16_prefetch(reinterpret_cast<const char*>(q) + kX16Ahead);
            const __m512i v = _mm512_loadu_si512(q);
            __m512i hi = v;  // Q5_K: the plane shifted down by u (nibble k's fifth bit at 4k + 4, or 0 of the other word)
            if constexpr (Q5) hi = u ? _mm512_srli_epi16(plane[h], u) : plane[h];
            FT_UNROLL for (int k = 0; k < 4; ++k) {
              __m512i e;
              if constexpr (Q5) {
                const __m512i t = _mm512_ternarylogic_epi32(v, hi, sel[k], 0xe4);  // sel ? v : hi
                e = k == 3 ? _mm512_ror_epi32(t, 12) : k ? _mm512_srli_epi16(t, 4 * k) : t;
                e = _mm512_ternarylogic_epi32(e, five, tab, 0xea);  // (e & 31) | 0x4300
              } else {
                e = k ? _mm512_srli_epi16(v, 4 * k) : v;
                e = k == 3 ? _mm512_or_si512(e, tab) : _mm512_ternarylogic_epi32(e, nib, tab, 0xea);
              }
              const __m512bh w = (__m512bh)e;
              FT_UNROLL for (int t = 0; t < NT; ++t) {
                const __m512bh x = (__m512bh)_mm512_set1_epi32(
                    *reinterpret_cast<const int32_t*>(xo + t * ldo + kQK * s + 8 * p + 2 * k));
                acc[h][t][(4 * u + k) % C] = _mm512_dpbf16_ps(acc[h][t][(4 * u + k) % C], w, x);
              }
            }
          }
          FT_UNROLL for (int h = 0; h < H; ++h) {
            const int j = jj + 4 * (hb + h);  // sub-block
            const __m512 dsc = _mm512_mul_ps(d, sc[hb + h]);
            const __m512 dmn = _mm512_fmadd_ps(dsc, _mm512_set1_ps(128.f), _mm512_mul_ps(dmin, mn[hb + h]));
            FT_UNROLL for (int t = 0; t < NT; ++t) {
              __m512 a = acc[h][t][0];
              FT_UNROLL for (int c = 1; c < C; ++c) a = _mm512_add_ps(a, acc[h][t][c]);
              y[t] = _mm512_fmadd_ps(a, dsc, y[t]);
              y[t] = _mm512_fnmadd_ps(dmn, _mm512_set1_ps(xs[t * nsub + 8 * s + j]), y[t]);
            }
          }
        }
      }
    }
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

}  // namespace

void rows_bf16act_q4kx16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                    int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<KX16<false>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

void rows_bf16act_q5kx16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                    int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<KX16<true>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
