// AVX2, int8 activations (opt-in, cpu/q8.h: Q8Act) for Q3_K_X16 (Q3_K with 16 rows interleaved: Q3_K_M / Q3_K_S
// files' experts and projections, cpu/formats.h): rows in the lanes (x86_avx2_x16.h). Built for AVX2 and for AVX-VNNI.
// Also 16-bit x (a bf16 engine's exact path, Q16Act; taken with AVX-VNNI only, dispatch.cpp): x16_prep_i16's order is
// the low fields' column pairs (xo[16p + 2k + {0, 1}] = columns 16p + 8 (k / 4) + {0, 4, 1, 5}[k % 4] + {0, 2}), so
// code k's pair of words less 4 meets x's pair in `vpdpwssd` (or `vpmaddwd`); y += d (sc - 32) dx dot a sub-block. Calls
// of up to 4 tokens take Q3kX16Wide instead (the int8 path's bytes widened to words; below), the same bits.
//
// A half-load of a sub-block's low 2-bit fields (16 columns, one scale) is row i's 16 codes in dword i: byte b holds
// the fields k = 4 (b % 2) .. +3 of word b / 2, so ((v >> 2j) & 3) puts in byte b the code of column 16p + {0, 8, 2,
// 10}[b] + {0, 4, 1, 5}[j] (cpu/formats.h), step j = 0..3 taking 4 columns of each row. The high-bit word (shifted
// down by the sub-block's parity) has code k's bit 2 above its field (k < 7), so ((hv >> 2j) & 4) is its bit in
// place; code 7's (j = 3, odd bytes) lies at bit 0 of the dword's other word: a byte rotation, once a sub-block. x is
// put in the same column order (x16_prep_i8_q3), so each step is one dword broadcast of x's 4 int8 columns against 4 bytes a
// row. With AVX-VNNI `vpdpbusd` sums them in int32, and per sub-block y += d (sc - 32) (dx dot - 4 sxh) (sxh: dx
// times x's sum over those 16 columns, Q8Act's sd halves) in two FMAs. In AVX2 `vpmaddubsw` pairs of the 4 steps are
// summed in int16 with -4 times x's sum of codes there, and one `vpmaddwd` by sc - 32 gives each row its scaled
// integer sum (exact: below); the two sub-blocks of an activation block add in int32 before one conversion and FMA
// by d dx. Exact integer dots (|dot| <= 16 * 7 * 127 < 2^14).
//
// Per 128 weights (8 rows, one sub-block) and token: 4 broadcasts and 4 `vpdpbusd` and 2 FMAs (or 4 `vpmaddubsw`, 4
// `vpaddw`, 1 `vpmaddwd`, 1 `vpaddd` and half an FMA), after 2 loads and ~24 shifts, masks and ors shared by the
// tile's tokens.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/arch/x86_avx2.h"       // hsum_i32
#include "cpu/arch/x86_avx2_x16.h"   // x16_tiles, x16_prep_i8_q3, kX16Ahead
#include "cpu/arch/x86_kq_fields.h"  // x16_q3_scales6

namespace ft {
namespace {

struct Q3kX16 {
  static constexpr int kTokens = kX16Tokens;  // tokens a tile at most (int8 x: kX16TokensI8, x16_tiles)
#if defined(__AVXVNNI__)
  static constexpr bool kOffsets = false;
#else
  static constexpr bool kOffsets = true;  // int8 x: x16_prep_i8_q3's int16 offsets in sx
#endif

  // Int8 x: step j's codes (0..7) as bytes, from a half-load v of low fields, hv (the high bits, shifted down by the
  // sub-block's parity) and rv (hv's bytes rotated down by one within each dword).
  static __m256i bytes(int j, const __m256i& v, const __m256i& hv, const __m256i& rv) {
    const __m256i lo = _mm256_and_si256(j ? _mm256_srli_epi16(v, 2 * j) : v, _mm256_set1_epi8(3));
    if (j < 3) return _mm256_or_si256(lo, _mm256_and_si256(j ? _mm256_srli_epi16(hv, 2 * j) : hv, _mm256_set1_epi8(4)));
    const __m256i even = _mm256_and_si256(_mm256_srli_epi16(hv, 6), _mm256_set1_epi16(0x0004));
    const __m256i odd = _mm256_and_si256(_mm256_slli_epi16(rv, 2), _mm256_set1_epi16(0x0400));
    return _mm256_or_si256(lo, _mm256_or_si256(even, odd));
  }

  // A super-block's tile: the prefetches of its lines past the codes (scales, d), and d of halves h0..h0+H-1.
  template <int H>
  static void tile_start(const uint8_t* tile, int h0, __m256 (&d)[H]) {
    FT_UNROLL for (int o = 1536; o < 1760; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(tile) + o + kX16Ahead, _MM_HINT_T1);
    FT_UNROLL for (int h = 0; h < H; ++h)
        d[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 1728 + 16 * (h0 + h))));
  }

  // Sub-block p's low fields v and high bits hv (shifted down by its parity) of halves h0..h0+H-1, and aux: hv through
  // `vpshufb` by shuf (int8: its bytes rotated; 16-bit: its words swapped); the next lines prefetched.
  template <int H>
  static void sub_load(const uint8_t* tile, int p, int h0, const __m256i& shuf, __m256i (&v)[H], __m256i (&hv)[H],
                       __m256i (&aux)[H]) {
    const uint8_t* lq = tile + 64 * p;
    const uint8_t* hq = tile + 1024 + 64 * (p / 2);
    _mm_prefetch(reinterpret_cast<const char*>(lq) + kX16Ahead, _MM_HINT_T1);
    if (p % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(hq) + kX16Ahead, _MM_HINT_T1);
    FT_UNROLL for (int h = 0; h < H; ++h) {
      v[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lq + 32 * (h0 + h)));
      const __m256i hw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hq + 32 * (h0 + h)));
      hv[h] = p % 2 ? _mm256_srli_epi16(hw, 1) : hw;
      aux[h] = _mm256_shuffle_epi8(hv[h], shuf);
    }
  }

  // 16-bit x: code k's pair of words less 4 (k < 7: its field at 2k of v, its high bit at 2k + 2 of hv; k = 7: the
  // high bit at bit 0 of the dword's other word: sw, hv's words swapped).
  static __m256i word(int k, const __m256i& v, const __m256i& hv, const __m256i& sw) {
    __m256i c;
    if (k < 7)
      c = _mm256_or_si256(_mm256_and_si256(k ? _mm256_srli_epi16(v, 2 * k) : v, _mm256_set1_epi16(3)),
                          _mm256_and_si256(k ? _mm256_srli_epi16(hv, 2 * k) : hv, _mm256_set1_epi16(4)));
    else
      c = _mm256_or_si256(_mm256_srli_epi16(v, 14), _mm256_and_si256(_mm256_slli_epi16(sw, 2), _mm256_set1_epi16(4)));
    return _mm256_sub_epi16(c, _mm256_set1_epi16(4));
  }

  // A sub-block's dots of rows 8 (h0 + h)..+7 with token t (x of the sub-block at xs + t * ldo; aux: sw or rv) into
  // acc[h][t]: 16-bit x, int32 sums of (code - 4) x.
  template <int NT, int H>
  static void dot(const __m256i (&v)[H], const __m256i (&hv)[H], const __m256i (&aux)[H], const int16_t* xs,
                  int64_t ldo, __m256i (&acc)[H][NT]) {
    FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) acc[h][t] = _mm256_setzero_si256();
    FT_UNROLL for (int k = 0; k < 8; ++k) {
      __m256i w[H];
      FT_UNROLL for (int h = 0; h < H; ++h) w[h] = word(k, v[h], hv[h], aux[h]);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const __m256i xp = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xs + t * ldo + 2 * k));
        FT_UNROLL for (int h = 0; h < H; ++h) acc[h][t] = x16_mac(acc[h][t], w[h], xp);
      }
    }
  }
  // Int8 x: with AVX-VNNI int32 sums of code x; in AVX2 the int16 pair sums (|sum| <= 4 * 2 * 7 * 127).
  template <int NT, int H>
  static void dot(const __m256i (&v)[H], const __m256i (&hv)[H], const __m256i (&aux)[H], const int8_t* xs,
                  int64_t ldo, __m256i (&acc)[H][NT]) {
    FT_UNROLL for (int j = 0; j < 4; ++j) {
      __m256i w[H];
      FT_UNROLL for (int h = 0; h < H; ++h) w[h] = bytes(j, v[h], hv[h], aux[h]);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const __m256i xq = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xs + t * ldo + 4 * j));
        FT_UNROLL for (int h = 0; h < H; ++h) {
#if defined(__AVXVNNI__)
          acc[h][t] = _mm256_dpbusd_avx_epi32(j ? acc[h][t] : _mm256_setzero_si256(), w[h], xq);
#else
          const __m256i pr = _mm256_maddubs_epi16(w[h], xq);
          acc[h][t] = j ? _mm256_add_epi16(acc[h][t], pr) : pr;
#endif
        }
      }
    }
  }

  // Rows r..r+15 of m against NT tokens, H halves (8 rows each) a pass: Y[t * ldy + i] = row r + i . token t. x:
  // 16-bit codes (E = int16_t, x16_prep_i16's order) or int8 (int8_t, x16_prep_i8_q3's).
  template <int NT, int H, class E>
  static void group(const WeightMat& m, int64_t r, const E* xo, int64_t ldo, const float* dx, const float* sx,
                    float* Y, int64_t ldy) {
    constexpr bool k8 = sizeof(E) == 1, folded = k8 && kOffsets;
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK, nb = m.cols / 32;
    // int8: the bytes rotated down by one within each dword; 16-bit: the words swapped
    const __m256i shuf = k8 ? _mm256_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12,  //
                                               1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12)
                            : _mm256_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13,  //
                                               2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    for (int h0 = 0; h0 < 2; h0 += H) {
      __m256 y[H][NT];
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) y[h][t] = _mm256_setzero_ps();
      for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* tile = g + s * kX16Q3Tile;
        __m256 d[H];
        tile_start(tile, h0, d);
        [[maybe_unused]] __m256i acc2[folded ? H : 1][folded ? NT : 1];  // folded: the two sub-blocks' int32 sums
#pragma GCC unroll 1
        for (int p = 0; p < 16; ++p) {  // sub-block p: columns 16p..16p+15 of the super-block
          __m256i v[H], hv[H], aux[H], acc[H][NT];
          sub_load(tile, p, h0, shuf, v, hv, aux);
          dot<NT, H>(v, hv, aux, xo + kQK * s + 16 * p, ldo, acc);
          const __m128i sc6 = x16_q3_scales6(tile + 1536, p);
          FT_UNROLL for (int h = 0; h < H; ++h) {
            const __m128i sc8 = h0 + h ? _mm_srli_si128(sc6, 8) : sc6;
            const __m256i sc = _mm256_sub_epi32(_mm256_cvtepu8_epi32(sc8), _mm256_set1_epi32(32));
            if constexpr (folded) {
              // the offset into the int16 sums (|sum| <= 16 * 7 * 127 + 4 * 16 * 127 < 2^15), the scale by
              // `vpmaddwd` (sc - 32 in both words of a row's dword): exact, |sum| <= 2 * 32 * 22352 < 2^21 over the
              // block's two sub-blocks, then one conversion and FMA by d dx a block
              const __m256i scw = _mm256_blend_epi16(sc, _mm256_slli_epi32(sc, 16), 0xaa);
              FT_UNROLL for (int t = 0; t < NT; ++t) {
                const __m256i off = _mm256_set1_epi32(reinterpret_cast<const int32_t*>(sx)[t * 2 * nb + 16 * s + p]);
                const __m256i a = _mm256_madd_epi16(_mm256_add_epi16(acc[h][t], off), scw);
                acc2[h][t] = p % 2 ? _mm256_add_epi32(acc2[h][t], a) : a;
              }
              if (p % 2)
                FT_UNROLL for (int t = 0; t < NT; ++t) {
                  const int64_t b = t * nb + 8 * s + p / 2;
                  y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc2[h][t]), _mm256_mul_ps(d[h], _mm256_set1_ps(dx[b])), y[h][t]);
                }
            } else {  // y += d (sc - 32) dx dot (int8 x: less d (sc - 32) 4 sxh)
              const __m256 dsc = _mm256_mul_ps(d[h], _mm256_cvtepi32_ps(sc));
              FT_UNROLL for (int t = 0; t < NT; ++t) {
                const int64_t b = t * nb + 8 * s + p / 2;  // the activation block of 32 columns
                y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(dsc, _mm256_set1_ps(dx[b])), y[h][t]);
                if constexpr (k8) y[h][t] = _mm256_fnmadd_ps(dsc, _mm256_set1_ps(4.f * sx[t * 2 * nb + 16 * s + p]), y[h][t]);
              }
            }
          }
        }
      }
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t)
          _mm256_storeu_ps(Y + t * ldy + 8 * (h0 + h), y[h][t]);
    }
  }
};

// 16-bit x at few tokens, where the code assembly binds: the int8 path's bytes of each step (4 columns of a row),
// widened to words by `vpunpcklbw` / `vpunpckhbw` (rows 0, 1 / 2, 3 of each lane, a row's 4 words in two dwords),
// against one qword broadcast of x's 4 matching words (x16_prep_i16_q3's order); `vphaddd` of the two then gives row
// i its sum in dword i, and -4 times x's sum over the sub-block (sx, as int32) replaces the per-code -4: the same
// exact integer as Q3kX16's 16-bit dot, so the same result bit for bit. Per 128 weights (8 rows, one sub-block) and
// token: 8 `vpdpwssd`, 4 broadcasts, a `vphaddd` and an add, after ~21 shifts, masks and ors and 8 unpacks (Q3kX16:
// 8 and 8, after ~45). With AVX-VNNI, one Sapphire-Rapids-class core, [16384, 2048], 1 / 2 / 4 / 8 tokens: 18.5 / 30.2 /
// 37.3 / 41 GMAC/s -> 21.1 / 30.6 / 37.8 / 37.2, so calls of up to 4 tokens take it (decode of a 48-layer Q3_K_M
// model on two cores 12.8-13.1 -> 13.7 tok/s). In AVX2 code it ties the Q3_K row kernel at one token (18.5): still
// not taken there (dispatch.cpp).
constexpr int64_t kQ3WideTokens = 4;  // calls of up to this many tokens take Q3kX16Wide
struct Q3kX16Wide {
  static constexpr int kTokens = kX16Tokens;
  template <int NT, int H, class E>
  static void group(const WeightMat& m, int64_t r, const E* xo, int64_t ldo, const float* dx, const float* sx,
                    float* Y, int64_t ldy) {
    static_assert(sizeof(E) == 2, "16-bit x only");
    const uint8_t* g = x16_tile(m.fmt, m.q, m.cols, r, 0);
    const int64_t nsb = m.cols / kQK, nb = m.cols / 32;
    const __m256i rot = _mm256_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12,  //
                                         1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12);
    const int32_t* off = reinterpret_cast<const int32_t*>(sx);
    for (int h0 = 0; h0 < 2; h0 += H) {
      __m256 y[H][NT];
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) y[h][t] = _mm256_setzero_ps();
      for (int64_t s = 0; s < nsb; ++s) {
        const uint8_t* tile = g + s * kX16Q3Tile;
        __m256 d[H];
        Q3kX16::tile_start(tile, h0, d);
#pragma GCC unroll 1
        for (int p = 0; p < 16; ++p) {
          __m256i v[H], hv[H], rv[H], lo[H][NT], hi[H][NT];
          Q3kX16::sub_load(tile, p, h0, rot, v, hv, rv);
          const int16_t* xs = xo + kQK * s + 16 * p;
          FT_UNROLL for (int j = 0; j < 4; ++j) {
            __m256i wl[H], wh[H];
            FT_UNROLL for (int h = 0; h < H; ++h) {
              const __m256i b = Q3kX16::bytes(j, v[h], hv[h], rv[h]);
              wl[h] = _mm256_unpacklo_epi8(b, _mm256_setzero_si256());
              wh[h] = _mm256_unpackhi_epi8(b, _mm256_setzero_si256());
            }
            FT_UNROLL for (int t = 0; t < NT; ++t) {
              const __m256i xq = _mm256_set1_epi64x(*reinterpret_cast<const int64_t*>(xs + t * ldo + 4 * j));
              FT_UNROLL for (int h = 0; h < H; ++h) {
                lo[h][t] = j ? x16_mac(lo[h][t], wl[h], xq) : _mm256_madd_epi16(wl[h], xq);
                hi[h][t] = j ? x16_mac(hi[h][t], wh[h], xq) : _mm256_madd_epi16(wh[h], xq);
              }
            }
          }
          const __m128i sc6 = x16_q3_scales6(tile + 1536, p);
          FT_UNROLL for (int h = 0; h < H; ++h) {
            const __m128i sc8 = h0 + h ? _mm_srli_si128(sc6, 8) : sc6;
            const __m256 dsc = _mm256_mul_ps(d[h], _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(sc8), _mm256_set1_epi32(32))));
            FT_UNROLL for (int t = 0; t < NT; ++t) {
              const __m256i a = _mm256_add_epi32(_mm256_hadd_epi32(lo[h][t], hi[h][t]), _mm256_set1_epi32(off[t * 2 * nb + 16 * s + p]));
              const int64_t b = t * nb + 8 * s + p / 2;
              y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_mul_ps(dsc, _mm256_set1_ps(dx[b])), y[h][t]);
            }
          }
        }
      }
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t)
          _mm256_storeu_ps(Y + t * ldy + 8 * (h0 + h), y[h][t]);
    }
  }
};

// Q3kX16Wide's x: each sub-block's 16 columns as 4 qwords, step j's columns c, c + 8, c + 2, c + 10 (c = {0, 4, 1,
// 5}[j]: the bytes of a row's dword), i.e. xo[16p + 4j + b] = column 16p + {0, 8, 2, 10}[b] + c, from a Q16Act block's
// even and odd halves by one word shuffle each; sx[t * 2 nb + 16 s + p] = -4 times the sum of sub-block p's codes as
// int32 (exact: |sum| <= 16 * 2^15); dx as x16_prep_i16's.
inline void x16_prep_i16_q3(const Q16Act& x, int nt, int64_t cols, int16_t* xo, int64_t ldo, float* dx, float* sx) {
  const int64_t nb = cols / 32;
  x16_block_scales(x, nt, nb, dx, sx);  // sx is overwritten below
  const __m256i perm = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,  //
                                        0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int t = 0; t < nt; ++t) {
    const int16_t* q = x.q + t * x.ldq;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i e = _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b)), perm);
      const __m256i o = _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b + 16)), perm);
      const __m256i s0 = _mm256_permute2x128_si256(e, o, 0x20), s1 = _mm256_permute2x128_si256(e, o, 0x31);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xo + t * ldo + 32 * b), s0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xo + t * ldo + 32 * b + 16), s1);
      const int32_t o0 = -4 * hsum_i32(_mm256_madd_epi16(s0, ones)), o1 = -4 * hsum_i32(_mm256_madd_epi16(s1, ones));
      std::memcpy(sx + t * 2 * nb + 2 * b, &o0, 4);
      std::memcpy(sx + t * 2 * nb + 2 * b + 1, &o1, 4);
    }
  }
}

}  // namespace

void FT_X16_NAME(rows_q8_q3kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  if (r0 % 16 || r1 % 16) return rows_q8_scalar(m, r0, r1, x, Y, ldy);  // callers split rows in 16s
  x16_tiles<Q3kX16, int8_t, x16_prep_i8_q3<Q3kX16::kOffsets>>(m, r0, r1, x, Y, ldy);
}

void FT_X16_NAME(rows_q16_q3kx16)(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  if (x.ntok <= kQ3WideTokens)
    x16_rows_i16<Q3kX16Wide, x16_prep_i16_q3>(m, r0, r1, x, Y, ldy);
  else
    x16_rows_i16<Q3kX16>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
