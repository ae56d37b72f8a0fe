// AVX-512 VNNI, 16-bit activations (cpu/q8.h: Q16Act) for Q4_K_X16, Q5_K_X16, Q3_K_X16, INT4_SYM_X16, MXFP4_X16 and INT8_SYM_X16: the rows-in-lanes kernels of
// x86_avx2_x16.h with all 16 rows of a group in one zmm, for bf16 engines on AVX-512 CPUs whose bf16 kernels are off
// (Intel's AVX-512 BF16: dispatch.cpp, bf16_nibbles_fast) or absent (Ice Lake; Zen 4 under FT_CPU_ISA=avx512).
//
// A 64-byte load is 8 columns of the 16 rows (dword i = row i's 8 codes, cpu/formats.h), so one vector holds what
// the AVX2 kernel takes as two halves: (dword >> 4k) & 0x000f000f is the pair of codes of nibble k, and one
// `vpdpwssd` with x's matching pair of 16-bit codes (a dword broadcast) adds both products to lane i in int32
// (the AVX2 kernel: `vpmaddwd` and `vpaddd` per half). A block's 16 such products sum exactly (as there). Per 512
// weights (16 rows, one block of 32 columns) and token: 16 `vpdpwssd` and 16 broadcasts after 4 loads and 7 shifts
// and masks shared by the tile's tokens, then Q4_K's two FMAs (d sc dx; dmin m sx) or INT4's two (s dx; s 8 sx).
// Tiles of 4..1 tokens (x16_rows_i16); Q4_K_X16 at one token a call goes to the AVX2 kernel on Intel (_ymm1). Exact
// integer dots; the fp32 scaling is the AVX2 kernels' lane for lane. Int8 x (opt-in) also on Q5_K_X16 (Q4_K_X16's with the fifth
// bits joined, Q5Bytes16), Q3_K_X16 and Q6_K_X16 (x86_avx2_q3kx16.cpp's and x86_avx2_q6kx16.cpp's, 16 rows a vector:
// Sub16). 16-bit x also on Q5_K_X16 (Q5Words16) and Q3_K_X16 (Sub16).
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "cpu/arch/x86_avx2_x16.h"       // x16_rows_i16, x16_prep_i16's column-pair order, kX16Ahead
#include "cpu/arch/x86_avx512_q4kx16.h"  // x16_scale_min, x16_d, x16_dmin, x16_group_scales
#include "cpu/arch/x86_x16_prefetch.h"    // x16_prefetch

namespace ft {
namespace {

// A 4-bit code's 16-bit word for `vpdpwssd`, as x86_avx2_x16.h's X16Nib / X16E2m1 with 16 rows a vector.
struct Nib16 {
  static constexpr int kOrder[4] = {0, 1, 2, 3};
  static __m512i word(int k, const __m512i& v, __m512i& /*lut*/, int /*u*/ = 0) {
    const __m512i nib = _mm512_set1_epi16(0x000f);
    return k == 3 ? _mm512_srli_epi16(v, 12) : _mm512_and_si512(k ? _mm512_srli_epi16(v, 4 * k) : v, nib);
  }
  // int8 x: the low and high nibbles as bytes (columns 8u..8u+3 and 8u+4..8u+7 of each row's dword)
  static void bytes(const __m512i& v, __m512i& lo, __m512i& hi, int /*u*/ = 0) {
    const __m512i m = _mm512_set1_epi8(0x0f);
    lo = _mm512_and_si512(v, m);
    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
  }
};

struct E2m1x16 {
  static constexpr int kOrder[4] = {0, 2, 1, 3};
  static __m512i word(int k, const __m512i& v, __m512i& lut, int /*u*/ = 0) {
    if (k < 2) {
      const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kX16E2m1Words)));
      lut = _mm512_shuffle_epi8(table, _mm512_and_si512(k ? _mm512_srli_epi16(v, 4) : v, _mm512_set1_epi8(0x0f)));
      return _mm512_and_si512(lut, _mm512_set1_epi16(0x00ff));
    }
    return _mm512_srli_epi16(lut, 8);
  }
  static void bytes(const __m512i& v, __m512i& lo, __m512i& hi, int /*u*/ = 0) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kX16E2m1Words)));
    Nib16::bytes(v, lo, hi);
    lo = _mm512_shuffle_epi8(table, lo);
    hi = _mm512_shuffle_epi8(table, hi);
  }
};

// acc[t] = the int32 dots of the 16 rows with token t over one block of 32 columns: its 4 loads at q, q + 64, ...
// and x at xo + t * ldo (that block's 32 codes, x16_prep_i16's order); the weights' words by dec.
template <int NT, class D = Nib16>
inline void dot_block16(const uint8_t* q, const int16_t* xo, int64_t ldo, __m512i (&acc)[NT], const D& dec = D()) {
  FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_si512();
#pragma GCC unroll 1
  for (int u = 0; u < 4; ++u) {
    const uint8_t* v0 = q + 64 * u;
    x16_prefetch(reinterpret_cast<const char*>(v0) + kX16Ahead);
    const __m512i v = _mm512_loadu_si512(v0);
    __m512i lut;
    FT_UNROLL for (int i = 0; i < 4; ++i) {
      const int k = D::kOrder[i];
      const __m512i w = dec.word(k, v, lut, u);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const __m512i xp = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + 8 * u + 2 * k));
        acc[t] = _mm512_dpwssd_epi32(acc[t], w, xp);
      }
    }
  }
}

// Q5_K_X16's codes as bytes for int8 x (x86_avx2_q4kx16.cpp's Q5Bytes, 16 rows a vector): P, the sub-block's plane of
// fifth bits; R, its dwords rotated down by a byte. A low nibble's fifth bit is bit 4 + u of its byte of P, a high
// nibble's bit u of its byte of R (load u of the sub-block).
struct Q5Bytes16 {
  __m512i P, R;
  explicit Q5Bytes16(const uint8_t* plane) : P(_mm512_loadu_si512(plane)), R(_mm512_ror_epi32(P, 8)) {}
  void bytes(const __m512i& v, __m512i& lo, __m512i& hi, int u) const {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m5 = _mm512_set1_epi8(0x10);
    // (a & b) | c, a | (b & c): ternary-logic 0xea, 0xf8
    lo = _mm512_ternarylogic_epi32(_mm512_and_si512(v, m4), _mm512_srli_epi16(P, u), m5, 0xf8);
    hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), _mm512_slli_epi16(R, 4 - u), m5, 0xf8);
  }
};

// Q5_K_X16's codes as 16-bit words for `vpdpwssd` (x86_avx2_q4kx16.cpp's Q5Words, 16 rows a vector): P, the
// sub-block's plane of fifth bits; A, its dwords' words swapped. Nibble k < 3 of load u finds its bit 4 above it once
// P's words are shifted down by u (st: P >> u, set at k = 0), nibble 3 at bit u of A's word.
struct Q5Words16 {
  static constexpr int kOrder[4] = {0, 1, 2, 3};
  __m512i P, A;
  explicit Q5Words16(const uint8_t* plane) : P(_mm512_loadu_si512(plane)), A(_mm512_ror_epi32(P, 16)) {}
  __m512i word(int k, const __m512i& v, __m512i& st, int u) const {
    if (k == 3)  // a | (b & c): ternary-logic 0xf8
      return _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 12), _mm512_slli_epi16(A, 4 - u), _mm512_set1_epi16(0x0010), 0xf8);
    if (k == 0) st = u ? _mm512_srli_epi16(P, u) : P;
    const __m512i c = _mm512_ternarylogic_epi32(_mm512_and_si512(v, _mm512_set1_epi16(0x000f << 4 * k)), st,
                                                _mm512_set1_epi16(0x0010 << 4 * k), 0xf8);
    return k ? _mm512_srli_epi16(c, 4 * k) : c;
  }
};

// The same over int8 x (x16_prep_i8's order: natural columns) for Q8Act: the codes as unsigned bytes (dec.bytes), one
// `vpdpbusd` with x's 4 int8 columns (a dword broadcast) per nibble half: 8 a block and token, not 16. Exact (|sum|
// <= 32 * 31 * 127 < 2^17).
template <int NT, class D = Nib16>
inline void dot_block16(const uint8_t* q, const int8_t* xo, int64_t ldo, __m512i (&acc)[NT], const D& dec = D()) {
  FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_si512();
  FT_UNROLL for (int u = 0; u < 4; ++u) {
    const uint8_t* v0 = q + 64 * u;
    x16_prefetch(reinterpret_cast<const char*>(v0) + kX16Ahead);
    __m512i lo, hi;
    dec.bytes(_mm512_loadu_si512(v0), lo, hi, u);
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      const __m512i x0 = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + 8 * u));
      const __m512i x1 = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + 8 * u + 4));
      acc[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[t], lo, x0), hi, x1);
    }
  }
}

// Q4_K_X16 (Q5 false) or Q5_K_X16 (Q5 true).
template <bool Q5>
struct KX16 {
  static constexpr int kTokens = 8;  // tokens a tile at most
  static constexpr int64_t kTileBytes = Q5 ? kX16Q5Tile : kX16Tile, kScales = Q5 ? 2560 : 2048, kD = kScales + 192;
  // Rows r..r+15 of m against NT tokens (H: the AVX2 driver's halves a pass, one vector here): Y[t * ldy + i] = row
  // r + i . token t.
  template <int NT, int H, class E>  // x: 16-bit codes (int16_t) or int8 (int8_t)
  static void group(const WeightMat& m, int64_t r, const E* xo, int64_t ldo, const float* dx, const float* sx,
                    float* Y, int64_t ldy) {
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK, nb = m.cols / 32;
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* tile = g + s * kTileBytes;
      const __m512 d = x16_d(tile, kD), dmin = x16_dmin(tile, kD);
      // sub-block j (block 8s + j of x): its exact dots, scaled into y by the rows' scale sc and min mn
      const auto sub_block = [&](int j, const __m512& sc, const __m512& mn) {
        __m512i acc[NT];
        if constexpr (Q5) {
          const uint8_t* plane = tile + 2048 + 64 * j;
          x16_prefetch(reinterpret_cast<const char*>(plane) + kX16Ahead);
          using Dec = std::conditional_t<sizeof(E) == 1, Q5Bytes16, Q5Words16>;
          dot_block16<NT>(tile + 256 * j, xo + kQK * s + 32 * j, ldo, acc, Dec(plane));
        } else {
          dot_block16<NT>(tile + 256 * j, xo + kQK * s + 32 * j, ldo, acc);
        }
        const __m512 dsc = _mm512_mul_ps(d, sc), dmn = _mm512_mul_ps(dmin, mn);
        FT_UNROLL for (int t = 0; t < NT; ++t) {
          const int64_t b = t * nb + 8 * s + j;
          y[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_mul_ps(dsc, _mm512_set1_ps(dx[b])), y[t]);
          y[t] = _mm512_fnmadd_ps(dmn, _mm512_set1_ps(sx[b]), y[t]);
        }
      };
      if constexpr (NT == 1 && !Q5) {
        // One token (a stream from DRAM): the 8 sub-blocks in memory order, their scales first, not 0, 4, 1, 5, ...
        // (1 KiB jumps back and forth in the 2.3 KiB tile). One Zen 5 core, builds alternating: [131072, 2048] at
        // one token 37.5-39.9 -> 42.7-46.2 GB/s; 48-layer Q4_K_M model decode 20.9-22.4 -> 23.6-24.7 tok/s. Two
        // cores (reading ~50 GB/s): decode 23.8-24.4 -> 23.4-25.0; prefill (the other order) 117 either way.
        __m512 sc[8], mn[8];
        FT_UNROLL for (int jj = 0; jj < 4; ++jj) {
          // the tile's 4 lines past its codes (scales, d, dmin), which the code loads' prefetches skip
          x16_prefetch(reinterpret_cast<const char*>(tile + kScales + 64 * jj) + kX16Ahead);
          x16_scale_min(tile + kScales, jj, sc[jj], mn[jj], sc[jj + 4], mn[jj + 4]);
        }
        FT_UNROLL for (int j = 0; j < 8; ++j) sub_block(j, sc[j], mn[j]);
      } else {
        // Q4_K packs the scales of sub-blocks j and j + 4 together: jj's pair, then the next (fewer live registers
        // with 8 tokens' sums)
        for (int jj = 0; jj < 4; ++jj) {
          x16_prefetch(reinterpret_cast<const char*>(tile + kScales + 64 * jj) + kX16Ahead);
          __m512 sc[2], mn[2];
          x16_scale_min(tile + kScales, jj, sc[0], mn[0], sc[1], mn[1]);
          FT_UNROLL for (int hb = 0; hb < 2; ++hb) sub_block(jj + 4 * hb, sc[hb], mn[hb]);
        }
      }
    }
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

// The K-quants with a scale per 16 columns and a code offset (Q3_K_X16, Q6_K_X16): per sub-block of 16 columns and
// token D::dot's sums -- int8 x: `vpdpbusd`, one a 4 columns of 16 rows, then y += d sc (dx dot - D::kOff sxh) in two
// FMAs (sc: D::scales8, sxh: dx times x's code sum over those columns, x16_prep_i8_halves' sx); 16-bit x (Q3_K_X16):
// `vpdpwssd` of the codes against x16_prep_i16's column pairs, less the offset either in each code (y += d sc dx dot)
// or, where D::kOffBySums, by the same two FMAs (x16_prep_i16_halves' sx). Exact integer dots (|dot| <= 16 * 63 *
// 127; 16-bit: 16 * 7 * 2^15).
template <class D>
struct Sub16 {
  static constexpr int kTokens = 8;  // tokens a tile at most
  template <int NT, int H, class E>
  static void group(const WeightMat& m, int64_t r, const E* xo, int64_t ldo, const float* dx, const float* sx,
                    float* Y, int64_t ldy) {
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK, nb = m.cols / 32;
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; ++s) {
      const uint8_t* tile = g + s * D::kTile;
      FT_UNROLL for (int64_t o = D::kScales; o < D::kTile; o += 64)  // the lines the code loads' prefetches skip
        x16_prefetch(reinterpret_cast<const char*>(tile) + o + kX16Ahead);
      const __m512 d = x16_d(tile, D::kD);
      alignas(64) int8_t buf[256];
      const int8_t* sc8 = D::scales8(tile, buf);  // the int8 scale of sub-block j, row i: sc8[16 j + i]
#pragma GCC unroll 1
      for (int j = 0; j < 16; ++j) {  // sub-block j: columns 16j..16j+15 of the super-block
        __m512i acc[NT];
        D::template dot<NT>(tile, j, xo + kQK * s + 16 * j, ldo, acc);
        const __m128i scj = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc8 + 16 * j));
        const __m512 dsc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(scj)));
        FT_UNROLL for (int t = 0; t < NT; ++t) {
          const int64_t b = t * nb + 8 * s + j / 2;  // the activation block of 32 columns
          y[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_mul_ps(dsc, _mm512_set1_ps(dx[b])), y[t]);
          if constexpr (sizeof(E) == 1 || D::template kOffBySums<NT>)
            y[t] = _mm512_fnmadd_ps(dsc, _mm512_set1_ps(D::kOff * sx[t * 2 * nb + 16 * s + j]), y[t]);
        }
      }
    }
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

// Q3_K_X16 (x86_avx2_q3kx16.cpp's AVX-VNNI kernels, 16 rows a vector): a sub-block is one load of low 2-bit fields
// and half a load of high bits; int8 x (x16_prep_i8_q3's) in 4 steps of 4 columns, 16-bit x (x16_prep_i16's) in 8
// code pairs.
struct Q3k {
  static constexpr int64_t kTile = kX16Q3Tile, kScales = 1536, kD = 1728;
  static constexpr float kOff = 4.f;
  // step j's codes (0..7) as bytes, from the low fields v, the high bits hv (shifted down by the sub-block's parity)
  // and rv (hv's dwords rotated down by a byte: code 7's bit)
  static __m512i bytes(int j, const __m512i& v, const __m512i& hv, const __m512i& rv) {
    const __m512i lo = _mm512_and_si512(j ? _mm512_srli_epi16(v, 2 * j) : v, _mm512_set1_epi8(3));
    if (j < 3) return _mm512_ternarylogic_epi32(lo, j ? _mm512_srli_epi16(hv, 2 * j) : hv, _mm512_set1_epi8(4), 0xf8);
    const __m512i odd = _mm512_and_si512(_mm512_slli_epi16(rv, 2), _mm512_set1_epi16(0x0400));
    return _mm512_ternarylogic_epi32(_mm512_or_si512(lo, odd), _mm512_srli_epi16(hv, 6), _mm512_set1_epi16(0x0004), 0xf8);
  }
  // Sub-block p's low fields v and high bits hv (shifted down by its parity); the next lines prefetched.
  static void sub_load(const uint8_t* tile, int p, __m512i& v, __m512i& hv) {
    const uint8_t* lq = tile + 64 * p;
    const uint8_t* hq = tile + 1024 + 64 * (p / 2);
    x16_prefetch(reinterpret_cast<const char*>(lq) + kX16Ahead);
    if (p % 2 == 0) x16_prefetch(reinterpret_cast<const char*>(hq) + kX16Ahead);
    v = _mm512_loadu_si512(lq);
    const __m512i hw = _mm512_loadu_si512(hq);
    hv = p % 2 ? _mm512_srli_epi16(hw, 1) : hw;
  }
  template <int NT>
  static void dot(const uint8_t* tile, int p, const int8_t* xs, int64_t ldo, __m512i (&acc)[NT]) {
    __m512i v, hv;
    sub_load(tile, p, v, hv);
    const __m512i rv = _mm512_ror_epi32(hv, 8);
    FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_si512();
    FT_UNROLL for (int j = 0; j < 4; ++j) {
      const __m512i w = bytes(j, v, hv, rv);
      FT_UNROLL for (int t = 0; t < NT; ++t)
          acc[t] = _mm512_dpbusd_epi32(acc[t], w, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xs + t * ldo + 4 * j)));
    }
  }
  // Whether the 16-bit dots of NT tokens leave the code offset to Sub16 (x's sums, one FMA a token and sub-block) rather
  // than take it off each code (a subtract a code pair, shared by the tokens): at one token. One Zen 5 core, T = 1,
  // GMAC/s in cache [8192, 2048] 61 -> 63, Qwen3-30B-A3B experts from DRAM 23.8 -> 25.4 GB/s; at 4 / 8 tokens the
  // FMAs cost more (134 / 145 -> 122 / 131 GMAC/s).
  template <int NT>
  static constexpr bool kOffBySums = NT == 1;
  // 16-bit x: code k's pair of words, 0..7, less 4 if Sub (k < 7: its field at 2k of v, its bit at 2k + 2 of hv;
  // k = 7: the bit at bit 0 of the dword's other word: sw, hv's words swapped)
  template <bool Sub>
  static __m512i word(int k, const __m512i& v, const __m512i& hv, const __m512i& sw) {
    const __m512i c =
        k < 7 ? _mm512_ternarylogic_epi32(_mm512_and_si512(k ? _mm512_srli_epi16(v, 2 * k) : v, _mm512_set1_epi16(3)),
                                          k ? _mm512_srli_epi16(hv, 2 * k) : hv, _mm512_set1_epi16(4), 0xf8)
              : _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 14), _mm512_slli_epi16(sw, 2), _mm512_set1_epi16(4), 0xf8);
    return Sub ? _mm512_sub_epi16(c, _mm512_set1_epi16(4)) : c;
  }
  template <int NT>
  static void dot(const uint8_t* tile, int p, const int16_t* xs, int64_t ldo, __m512i (&acc)[NT]) {
    __m512i v, hv;
    sub_load(tile, p, v, hv);
    const __m512i sw = _mm512_ror_epi32(hv, 16);
    FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_si512();
    FT_UNROLL for (int k = 0; k < 8; ++k) {
      const __m512i w = word<!kOffBySums<NT>>(k, v, hv, sw);
      FT_UNROLL for (int t = 0; t < NT; ++t)
          acc[t] = _mm512_dpwssd_epi32(acc[t], w, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xs + t * ldo + 2 * k)));
    }
  }
  // The tile's scales less 32 (-32..31), 16 bytes a sub-block (byte i: row i), into buf: all 16 sub-blocks at once
  // (x86_kq_fields.h x16_q3_scales6's fields, 4 sub-blocks a vector), not one sub-block at a time with its index
  // arithmetic.
  static const int8_t* scales8(const uint8_t* tile, int8_t* buf) {
    const uint8_t* P = tile + 1536;  // planes 0..7: low nibbles (sub-blocks j % 8; j >= 8 the high nibble), 8..11: high bits
    const __m512i a0 = _mm512_loadu_si512(P), a1 = _mm512_loadu_si512(P + 64), b = _mm512_loadu_si512(P + 128);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32);
    // (a & b) | c: ternary-logic 0xea; sub-blocks 4m .. 4m + 3: low nibbles, high bits at 2m of planes 8..11
    const __m512i lo[4] = {a0, a1, _mm512_srli_epi16(a0, 4), _mm512_srli_epi16(a1, 4)};
    const __m512i hi[4] = {_mm512_slli_epi16(b, 4), _mm512_slli_epi16(b, 2), b, _mm512_srli_epi16(b, 2)};
    FT_UNROLL for (int q = 0; q < 4; ++q)
      _mm512_store_si512(buf + 64 * q, _mm512_sub_epi8(_mm512_ternarylogic_epi32(lo[q], m4, _mm512_and_si512(hi[q], m30), 0xea), k32));
    return buf;
  }
};

// Q6_K_X16 (x86_avx2_q6kx16.cpp's int8 kernel, 16 rows a vector; x16_prep_i8_halves' x): a sub-block is two loads of
// low nibbles and one of high 2-bit fields; each load's low- and high-nibble columns as bytes of 6-bit codes (the
// low nibble's field in place in the same byte of the high-bit word, the high nibble's in the other byte of its
// 16-bit word: one `vpshufb` swap), two `vpdpbusd` a load.
struct Q6k {
  static constexpr int64_t kTile = kX16Q6Tile, kScales = 3072, kD = 3328;
  static constexpr float kOff = 32.f;
  template <int NT>
  static void dot(const uint8_t* tile, int j, const int8_t* xs, int64_t ldo, __m512i (&acc)[NT]) {
    const __m512i swap = _mm512_broadcast_i32x4(_mm_setr_epi8(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const uint8_t* hq = tile + 2048 + 64 * j;
    x16_prefetch(reinterpret_cast<const char*>(hq) + kX16Ahead);
    const __m512i hw = _mm512_loadu_si512(hq);
    FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_si512();
    FT_UNROLL for (int e = 0; e < 2; ++e) {
      const uint8_t* q = tile + 64 * (2 * j + e);
      x16_prefetch(reinterpret_cast<const char*>(q) + kX16Ahead);
      const __m512i v = _mm512_loadu_si512(q), he = e ? _mm512_srli_epi16(hw, 2) : hw;
      // (a & b) | (c & ~b) with b the nibble mask: ternary-logic 0xe2 (b ? a : c)
      const __m512i lo = _mm512_ternarylogic_epi32(v, m4, _mm512_and_si512(he, m30), 0xe2);
      const __m512i hi = _mm512_ternarylogic_epi32(
          _mm512_srli_epi16(v, 4), m4, _mm512_and_si512(_mm512_slli_epi16(_mm512_shuffle_epi8(he, swap), 4), m30), 0xe2);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const int8_t* x = xs + t * ldo + 8 * e;
        acc[t] = _mm512_dpbusd_epi32(acc[t], lo, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(x)));
        acc[t] = _mm512_dpbusd_epi32(acc[t], hi, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(x + 4)));
      }
    }
  }
  template <int NT>
  static constexpr bool kOffBySums = false;  // int8 x only: the offset always by x's sums
  static const int8_t* scales8(const uint8_t* tile, int8_t* /*buf*/) { return reinterpret_cast<const int8_t*>(tile + 3072); }
};

// The 4-bit X16 formats with one scale a row per block of 32 columns (INT4_SYM_X16: its group's f16 / fp32 scale,
// codes q - 8; MXFP4_X16: 2^(e - 127) from its e8m0 byte, codes 2 e2m1 + 12, halved): per block the int32 dots by F's
// decoder, then y += s (F::kMul dx dot - F::kOff sx) in two FMAs (x86_avx2_x16.h's BlockScaledX16, 16 rows a vector).
template <class F>
struct BlockScaled16 {
  static constexpr int kTokens = 8;  // tokens a tile at most
  template <int NT, int H, class E>  // x: 16-bit codes (int16_t) or int8 (int8_t)
  static void group(const WeightMat& m, int64_t r, const E* xo, int64_t ldo, const float* dx, const float* sx,
                    float* Y, int64_t ldy) {
    const int64_t nb = m.cols / 32;
    const uint8_t* q = m.q + r * nb * 16;  // the group's blocks: 256 bytes each (16 rows x 32 columns)
    const X16ScaleAhead sa(m, r, 256, kX16Ahead);
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nb; ++j) {
      __m512i acc[NT];
      x16_prefetch(sa.at(j));  // a block is at most a line of scales
      dot_block16<NT, typename F::Dec>(q + 256 * j, xo + 32 * j, ldo, acc);
      const __m512 s = F::scales(m, r, j);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const int64_t b = t * nb + j;
        y[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_mul_ps(s, _mm512_set1_ps(F::kMul * dx[b])), y[t]);
        y[t] = _mm512_fnmadd_ps(s, _mm512_set1_ps(F::kOff * sx[b]), y[t]);
      }
    }
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

struct Int4Scales {
  using Dec = Nib16;
  static constexpr float kMul = 1.f, kOff = 8.f;
  static __m512 scales(const WeightMat& m, int64_t r, int64_t j) { return x16_group_scales(m, r, j); }
};

struct Mxfp4Scales {
  using Dec = E2m1x16;
  static constexpr float kMul = 0.5f, kOff = 6.f;
  static __m512 scales(const WeightMat& m, int64_t r, int64_t j) {  // 2^(e - 127) (e = 0: 2^-127; 255: Inf)
    const __m128i e = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(m.scale) + nib_x16_scale_at(m.scale_stride, r, j)));
    return _mm512_castsi512_ps(
        _mm512_max_epu32(_mm512_slli_epi32(_mm512_cvtepu8_epi32(e), 23), _mm512_set1_epi32(0x00400000)));
  }
};

struct Int8X16 {  // x86_avx2_int8x16.cpp's, 16 rows a vector (x in Q16Act's own order: x16_copy_i16)
  static constexpr int kTokens = 8;  // tokens a tile at most
  template <int NT, int H>
  static void group(const WeightMat& m, int64_t r, const int16_t* xo, int64_t ldo, const float* dx, const float* /*sx*/,
                    float* Y, int64_t ldy) {
    const int64_t nb = m.cols / 32;
    const uint8_t* q = m.q + r * m.cols;  // the group's blocks: 512 bytes each (16 rows x 32 columns)
    const X16ScaleAhead sa(m, r, 512, kX16Ahead);
    __m512 y[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) y[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nb; ++j) {
      __m512i acc[NT];
      FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_si512();
      x16_prefetch(sa.at(j));  // a block is at most a line of scales
      const int16_t* xb = xo + 32 * j;
#pragma GCC unroll 2
      for (int p = 0; p < 8; ++p) {
        const uint8_t* v0 = q + 512 * j + 64 * p;
        x16_prefetch(reinterpret_cast<const char*>(v0) + kX16Ahead);
        const __m512i v = _mm512_loadu_si512(v0);
        const __m512i even = _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8), odd = _mm512_srai_epi16(v, 8);
        FT_UNROLL for (int t = 0; t < NT; ++t) {
          acc[t] = _mm512_dpwssd_epi32(acc[t], even, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xb + t * ldo + 2 * p)));
          acc[t] = _mm512_dpwssd_epi32(acc[t], odd, _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(xb + t * ldo + 16 + 2 * p)));
        }
      }
      const __m512 s = x16_group_scales(m, r, j);
      FT_UNROLL for (int t = 0; t < NT; ++t)
          y[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_mul_ps(s, _mm512_set1_ps(dx[t * nb + j])), y[t]);
    }
    FT_UNROLL for (int t = 0; t < NT; ++t) _mm512_storeu_ps(Y + t * ldy, y[t]);
  }
};

}  // namespace

void rows_q16_q4kx16_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy);

void rows_q16_q4kx16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<KX16<false>>(m, r0, r1, x, Y, ldy);
}

// Intel's: one token in the AVX2 kernel, which kept one core's DRAM stream fuller (Sapphire-Rapids class, [73728,
// 2048]: 18.3-19.2 against 17.3-18.1 GMAC/s; a 48-layer Q4_K_M decode on one core 6.6 against 6.3 tok/s; equal on two)
void rows_q16_q4kx16_avx512vnni_ymm1(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y,
                                     int64_t ldy) {
  if (x.ntok == 1) return rows_q16_q4kx16_avx2(m, r0, r1, x, Y, ldy);
  rows_q16_q4kx16_avx512vnni(m, r0, r1, x, Y, ldy);
}

void rows_q16_int4x16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<BlockScaled16<Int4Scales>>(m, r0, r1, x, Y, ldy);
}

void rows_q16_mxfp4x16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<BlockScaled16<Mxfp4Scales>>(m, r0, r1, x, Y, ldy);
}

void rows_q16_q5kx16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<KX16<true>>(m, r0, r1, x, Y, ldy);
}

void rows_q16_q3kx16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<Sub16<Q3k>, x16_prep_i16_halves>(m, r0, r1, x, Y, ldy);
}

void rows_q8_q4kx16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  x16_rows_i8<KX16<false>>(m, r0, r1, x, Y, ldy);
}

void rows_q8_q5kx16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  x16_rows_i8<KX16<true>>(m, r0, r1, x, Y, ldy);
}

void rows_q8_q3kx16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  if (r0 % 16 || r1 % 16) return rows_q8_scalar(m, r0, r1, x, Y, ldy);  // callers split rows in 16s
  x16_tiles<Sub16<Q3k>, int8_t, x16_prep_i8_q3<false>>(m, r0, r1, x, Y, ldy);
}

void rows_q8_q6kx16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  if (r0 % 16 || r1 % 16) return rows_q8_scalar(m, r0, r1, x, Y, ldy);  // callers split rows in 16s
  x16_tiles<Sub16<Q6k>, int8_t, x16_prep_i8_halves>(m, r0, r1, x, Y, ldy);
}

void rows_q8_int4x16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  x16_rows_i8<BlockScaled16<Int4Scales>>(m, r0, r1, x, Y, ldy);
}

void rows_q8_mxfp4x16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  x16_rows_i8<BlockScaled16<Mxfp4Scales>>(m, r0, r1, x, Y, ldy);
}

void rows_q16_int8x16_avx512vnni(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  x16_rows_i16<Int8X16, x16_copy_i16>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
