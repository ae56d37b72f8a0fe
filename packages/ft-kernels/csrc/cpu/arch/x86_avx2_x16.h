// AVX2, 16-bit activations (cpu/q8.h: Q16Act): what the rows-in-lanes kernels of the 4-bit X16 formats (Q4_K_X16:
// x86_avx2_q4kx16.cpp; INT4_SYM_X16: x86_avx2_int4x16.cpp) share, for a bf16 engine on CPUs without a bf16 dot
// product (Zen 2/3, Intel desktops; AVX-512 without BF16): x put in the tiles' column-pair order, a block's int32
// dot products, and the loop over tiles of tokens and groups of 16 rows.
//
// Lane i of a ymm is row i of one half (8 rows) of a group's 16. A 64-byte load is 8 columns of the 16 rows, its
// first 32 bytes rows 0..7 and its last rows 8..15; dword i of a half is row i's 8 codes (word 0: columns 8p + {0,
// 4, 1, 5}, word 1: 8p + {2, 6, 3, 7}, nibble k each; cpu/formats.h). (dword >> 4k) & 0x000f000f, by a 16-bit shift
// and a mask, is the pair of codes of nibble k, and `vpmaddwd` with x's matching pair of 16-bit codes (one dword
// broadcast) adds both products to lane i in int32. A block's 16 such products sum exactly (|sum| < 16 * 2 * 15 *
// 2^15 < 2^24, so its conversion to fp32 is exact too). Up to 2 tokens a tile both halves run in one pass; 3 or 4
// tokens take a pass per half (the second reads the group's bytes from cache), so that the accumulators fit the 16
// ymm registers. Included by files compiled with AVX2, FMA and F16C.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf
#include "cpu/dispatch.h"          // rows_scalar
#include "cpu/q8.h"

namespace ft {
namespace {

// Built twice (CMakeLists.txt): for AVX2, and with AVX-VNNI (Intel's Alder Lake and later desktops and laptops:
// `vpdpwssd` on ymm, one instruction for `vpmaddwd` and `vpaddd`), where the kernels' exported names end in
// _avxvnni instead of _avx2 (FT_X16_NAME). With VNNI the sums are chains of `vpdpwssd` (latency 5): a tile of 8 tokens
// keeps 8 in flight (its fp32 results, once a block, go to the stack), where 4 would leave them latency-bound.
#if defined(__AVXVNNI__)
#define FT_X16_NAME(name) name##_avxvnni
constexpr int kX16Tokens = 8;  // tokens a tile at most (then 4, 3, 2, 1)
#else
#define FT_X16_NAME(name) name##_avx2
constexpr int kX16Tokens = 4;  // tokens a tile at most for 16 ymm registers (then 3, 2, 1)
#endif
// Int8 x: 8 tokens a tile in both builds (16-bit sums of 8 tokens and the 4 code vectors of a half-load fit the 16 ymm
// registers; the fp32 results, once a block, go to the stack).
constexpr int kX16TokensI8 = 8;
constexpr int kX16Ahead = 8192;  // software prefetch distance on the (single, sequential) tile stream

// acc + the int32 dot products of w's and x's 16-bit pairs, lane by lane.
inline __m256i x16_mac(const __m256i& acc, const __m256i& w, const __m256i& x) {
#if defined(__AVXVNNI__)
  return _mm256_dpwssd_avx_epi32(acc, w, x);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
#endif
}

// dx[t * nb + b] = token t's block b's d, sx[t * nb + b] = its sd over both halves (d times the sum of its codes:
// exact, |sum| < 2^20), for tokens [0, nt) of x (16-bit or int8 codes).
template <class E>
inline void x16_block_scales(const QAct<E>& x, int nt, int64_t nb, float* dx, float* sx) {
  for (int t = 0; t < nt; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      dx[t * nb + b] = x.d[t * x.ldb + b];
      sx[t * nb + b] = x.sd[t * 2 * x.ldb + 2 * b] + x.sd[t * 2 * x.ldb + 2 * b + 1];
    }
}

// Tokens [0, nt) of x in the tiles' column-pair order: xo[t * ldo + 32b + 8u + 2k + {0, 1}] = the codes of block b's
// columns 8u + {0, 4, 1, 5}[k] and 8u + {2, 6, 3, 7}[k]; dx and sx by x16_block_scales. In a Q16Act block (16 even
// columns, then 16 odd ones) the 8 columns of load u are qword u of the even half followed by qword u of the odd half.
inline void x16_prep_i16(const Q16Act& x, int nt, int64_t cols, int16_t* xo, int64_t ldo, float* dx, float* sx) {
  const int64_t nb = cols / 32;
  for (int t = 0; t < nt; ++t) {
    const int16_t* q = x.q + t * x.ldq;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b));
      const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b + 16));
      const __m256i lo = _mm256_unpacklo_epi64(e, o), hi = _mm256_unpackhi_epi64(e, o);  // [e0 o0 | e2 o2], [e1 o1 | e3 o3]
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xo + t * ldo + 32 * b), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xo + t * ldo + 32 * b + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
  x16_block_scales(x, nt, nb, dx, sx);
}

// Tokens [0, nt) of x in Q16Act's own order (each block's 16 even columns, then its 16 odd ones), for the 8-bit X16
// formats (x86_avx2_int8x16.cpp), whose byte pairs are columns 4p + {0, 2} and 4p + {1, 3}: rows ldo apart (no 4 KiB
// aliasing), dx and sx as x16_prep_i16's.
inline void x16_copy_i16(const Q16Act& x, int nt, int64_t cols, int16_t* xo, int64_t ldo, float* dx, float* sx) {
  for (int t = 0; t < nt; ++t) std::memcpy(xo + t * ldo, x.q + t * x.ldq, cols * sizeof(int16_t));
  x16_block_scales(x, nt, cols / 32, dx, sx);
}
using X16Prep = void (*)(const Q16Act&, int, int64_t, int16_t*, int64_t, float*, float*);

// Int8 activations (cpu/q8.h: Q8Act, opt-in): tokens [0, nt) of x in natural column order (a Q8Act block holds its
// 16 even columns, then its 16 odd ones), the order of a half-load's nibbles (low: columns 8u..8u+3, high:
// 8u+4..8u+7, a row's 4 bytes); dx and sx by x16_block_scales.
inline void x16_prep_i8(const Q8Act& x, int nt, int64_t cols, int8_t* xo, int64_t ldo, float* dx, float* sx) {
  const int64_t nb = cols / 32;
  for (int t = 0; t < nt; ++t) {
    const int8_t* q = x.q + t * x.ldq;
    for (int64_t b = 0; b < nb; ++b) {
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b));
      const __m128i o = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b + 16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(xo + t * ldo + 32 * b), _mm_unpacklo_epi8(e, o));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(xo + t * ldo + 32 * b + 16), _mm_unpackhi_epi8(e, o));
    }
  }
  x16_block_scales(x, nt, nb, dx, sx);
}

// x16_prep_i8's x, with sx a value a half block (16 columns; room: x16_tiles): sx[t * 2 nb + 2b + h] = Q8Act's
// sd of half h of block b, for the K-quants with a scale per 16 columns and a code offset (Q6_K_X16, Q3_K_X16).
template <class E, void (*Prep)(const QAct<E>&, int, int64_t, E*, int64_t, float*, float*)>
inline void x16_prep_halves(const QAct<E>& x, int nt, int64_t cols, E* xo, int64_t ldo, float* dx, float* sx) {
  const int64_t nb = cols / 32;
  Prep(x, nt, cols, xo, ldo, dx, sx);
  for (int t = 0; t < nt; ++t)
    for (int64_t i = 0; i < 2 * nb; ++i) sx[t * 2 * nb + i] = x.sd[t * 2 * x.ldb + i];
}
inline constexpr auto x16_prep_i8_halves = x16_prep_halves<int8_t, x16_prep_i8>;
// The same over x16_prep_i16's x (Q3_K_X16's zmm 16-bit kernel, which takes its code offset off with them).
inline constexpr auto x16_prep_i16_halves = x16_prep_halves<int16_t, x16_prep_i16>;

// Q3_K_X16 (x86_avx2_q3kx16.cpp, x86_avx512vnni_x16i16.cpp): x16_prep_i8_halves' x with each 16 columns in the
// kernels' step order, xo[16p + 4j + b] = column 16p + {0, 8, 2, 10}[b] + {0, 4, 1, 5}[j]. With kOffsets sx holds
// instead, as int32 at the same places, -4 times the sum of the codes over each 16 columns as int16 (|sum| <= 16 *
// 127: exact) in its low half (the AVX2 kernel's offsets).
template <bool kOffsets>
inline void x16_prep_i8_q3(const Q8Act& x, int nt, int64_t cols, int8_t* xo, int64_t ldo, float* dx, float* sx) {
  if constexpr (kOffsets)
    x16_prep_i8(x, nt, cols, xo, ldo, dx, sx);  // every sx value is overwritten below
  else
    x16_prep_i8_halves(x, nt, cols, xo, ldo, dx, sx);
  const __m128i perm = _mm_setr_epi8(0, 8, 2, 10, 4, 12, 6, 14, 1, 9, 3, 11, 5, 13, 7, 15);
  for (int t = 0; t < nt; ++t)
    for (int64_t c = 0; c < cols; c += 16) {
      int8_t* q = xo + t * ldo + c;
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm_shuffle_epi8(v, perm));
      if constexpr (kOffsets) {  // the codes + 128 as unsigned bytes, summed by `vpsadbw` in two halves of 8
        const __m128i h = _mm_sad_epu8(_mm_xor_si128(v, _mm_set1_epi8(-128)), _mm_setzero_si128());
        const int sum = _mm_cvtsi128_si32(h) + _mm_extract_epi16(h, 4) - 16 * 128;
        const uint32_t off = static_cast<uint16_t>(static_cast<int16_t>(-4 * sum));
        std::memcpy(sx + t * 2 * (cols / 32) + c / 16, &off, 4);
      }
    }
}

// INT4_SYM_X16, INT8_SYM_X16: the scales of rows r + 8h..+7 for block j (columns 32j..32j+31), f16 or fp32, as fp32.
inline __m256 x16_group_scales8(const WeightMat& m, int64_t r, int64_t j, int h) {
  const int64_t i = nib_x16_scale_at(m.scale_stride, r, 32 * j / m.group) + 8 * h;
  if (m.scale_f16)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(m.scale) + i)));
  return _mm256_loadu_ps(static_cast<const float*>(m.scale) + i);
}

// A 4-bit code's 16-bit word for `vpmaddwd`: nibble k's pair of words (columns {0, 4, 1, 5}[k] and {2, 6, 3, 7}[k]
// of the 8 a load holds) from a half-load v. X16Nib: the code itself, 0..15 ((dword >> 4k) & 0x000f000f: a shift and
// a mask). X16E2m1: MXFP4's e2m1 value times 2, plus 12 (0..24; exact small integers, so the offset 12 times x's sum
// of codes comes off with the scale): one `vpshufb` over the low (k = 0, 2) or high (k = 1, 3) nibbles of v's bytes
// gives each byte its value, kept in `lut` (per half) for the next k of the pair, whose word is its low (k = 0, 1)
// or high (k = 2, 3) byte. Both run k in kOrder; k is a constant once the step loop is unrolled. A decoder is passed
// to x16_dot_block as an object, whose word and bytes also take the half h (0, 1) and the load u (0..3) of the block:
// stateless here, a Q5_K sub-block's fifth-bit plane in x86_avx2_q4kx16.cpp's.
struct X16Nib {
  static constexpr int kOrder[4] = {0, 1, 2, 3};
  static __m256i word(int k, const __m256i& v, __m256i& /*lut*/, int /*h*/ = 0, int /*u*/ = 0) {
    const __m256i nib = _mm256_set1_epi16(0x000f);
    return k == 3 ? _mm256_srli_epi16(v, 12) : _mm256_and_si256(k ? _mm256_srli_epi16(v, 4 * k) : v, nib);
  }
  // int8 x: a half-load's low and high nibbles as bytes (columns 8u..8u+3 and 8u+4..8u+7 of each row's dword)
  static constexpr int kMaxCode = 15;
  static void bytes(const __m256i& v, __m256i& lo, __m256i& hi, int /*h*/ = 0, int /*u*/ = 0) {
    const __m256i m = _mm256_set1_epi8(0x0f);
    lo = _mm256_and_si256(v, m);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
  }
};

// 2 e2m1(code) + 12 for the codes 0..15 (X16E2m1; the AVX-512 VNNI kernels' E2m1x16).
alignas(16) constexpr int8_t kX16E2m1Words[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

struct X16E2m1 {
  static constexpr int kOrder[4] = {0, 2, 1, 3};  // the low nibbles' pair, then the high ones'
  static __m256i word(int k, const __m256i& v, __m256i& lut, int /*h*/ = 0, int /*u*/ = 0) {
    if (k < 2) {
      const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kX16E2m1Words)));
      const __m256i lo = _mm256_set1_epi8(0x0f);
      lut = _mm256_shuffle_epi8(table, _mm256_and_si256(k ? _mm256_srli_epi16(v, 4) : v, lo));
      return _mm256_and_si256(lut, _mm256_set1_epi16(0x00ff));
    }
    return _mm256_srli_epi16(lut, 8);
  }
  static constexpr int kMaxCode = 24;
  static void bytes(const __m256i& v, __m256i& lo, __m256i& hi, int /*h*/ = 0, int /*u*/ = 0) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kX16E2m1Words)));
    X16Nib::bytes(v, lo, hi);
    lo = _mm256_shuffle_epi8(table, lo);
    hi = _mm256_shuffle_epi8(table, hi);
  }
};

// acc[h][t] = the int32 dots of rows 8 (h0 + h)..+7 with token t over one block of 32 columns: its 4 loads at q, q +
// 64, ... and x at xo + t * ldo (that block's 32 codes, x16_prep_i16's order); the weights' words by dec (X16Nib,
// X16E2m1, ...).
template <int NT, int H, class D = X16Nib>
inline void x16_dot_block(const uint8_t* q, int h0, const int16_t* xo, int64_t ldo, __m256i (&acc)[H][NT],
                          const D& dec = D()) {
  FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) acc[h][t] = _mm256_setzero_si256();
  // a loop: unrolled, GCC hoisted the 4 loads and spilled products (Q4_K_X16, one Zen 4 core at one token: 31 -> 35
  // GMAC/s)
#pragma GCC unroll 1
  for (int u = 0; u < 4; ++u) {
    const uint8_t* v0 = q + 64 * u;
    _mm_prefetch(reinterpret_cast<const char*>(v0) + kX16Ahead, _MM_HINT_T1);
    __m256i v[H], lut[H];
    FT_UNROLL for (int h = 0; h < H; ++h) v[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + 32 * (h0 + h)));
    FT_UNROLL for (int i = 0; i < 4; ++i) {
      const int k = D::kOrder[i];
      __m256i w[H];
      FT_UNROLL for (int h = 0; h < H; ++h) w[h] = dec.word(k, v[h], lut[h], h0 + h, u);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const __m256i xp = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + 8 * u + 2 * k));
        FT_UNROLL for (int h = 0; h < H; ++h) acc[h][t] = x16_mac(acc[h][t], w[h], xp);
      }
    }
  }
}

// The same over int8 x (x16_prep_i8's order) for Q8Act: the codes as unsigned bytes (dec.bytes) against x's signed
// ones, 4 columns a dword. With AVX-VNNI one `vpdpbusd` adds a row's 4 products to its lane in int32. In AVX2
// `vpmaddubsw` sums pairs in int16 (|pair| <= 2 * D::kMaxCode * 127, no saturation), `vpaddw` adds the pairs of
// kWiden loads (|sum| <= 4 kWiden kMaxCode 127 < 2^15: 4 loads for codes <= 15, 2 for MXFP4's <= 24), and one
// `vpmaddwd` with ones widens them to int32: per 8 rows, 4 columns and token 1 + 1 instructions, against the 16-bit
// path's 2 + 2. Exact: |sum| <= 32 * 31 * 127 < 2^17.
template <int NT, int H, class D = X16Nib>
inline void x16_dot_block(const uint8_t* q, int h0, const int8_t* xo, int64_t ldo, __m256i (&acc)[H][NT],
                          const D& dec = D()) {
#if defined(__AVXVNNI__)
  FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) acc[h][t] = _mm256_setzero_si256();
#else
  constexpr int kWiden = D::kMaxCode <= 15 ? 4 : 2;  // Q5_K's codes <= 31: 2
  static_assert(4 * kWiden * D::kMaxCode * 127 < 32768);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s[H][NT];
#endif
  FT_UNROLL for (int u = 0; u < 4; ++u) {
    const uint8_t* v0 = q + 64 * u;
    _mm_prefetch(reinterpret_cast<const char*>(v0) + kX16Ahead, _MM_HINT_T1);
    __m256i lo[H], hi[H];
    FT_UNROLL for (int h = 0; h < H; ++h)
        dec.bytes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + 32 * (h0 + h))), lo[h], hi[h], h0 + h, u);
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      const __m256i x0 = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + 8 * u));
      const __m256i x1 = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(xo + t * ldo + 8 * u + 4));
      FT_UNROLL for (int h = 0; h < H; ++h) {
#if defined(__AVXVNNI__)
        acc[h][t] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc[h][t], lo[h], x0), hi[h], x1);
#else
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], x0), _mm256_maddubs_epi16(hi[h], x1));
        s[h][t] = u % kWiden ? _mm256_add_epi16(s[h][t], p) : p;
        if (u % kWiden == kWiden - 1) {
          const __m256i w = _mm256_madd_epi16(s[h][t], ones);
          acc[h][t] = u < kWiden ? w : _mm256_add_epi32(acc[h][t], w);
        }
#endif
      }
    }
  }
}

// The 4-bit X16 formats with one scale a row per block of 32 columns (INT4_SYM_X16: x86_avx2_int4x16.cpp;
// MXFP4_X16: x86_avx2_mxfp4x16.cpp): per block the exact int32 dots by F's decoder (F::Dec), then y += s (F::kMul dx
// dot - F::kOff sx) in two FMAs, s = F::scales(m, r, j, h) the 8 rows' scales (dx: the activation block's
// power-of-two scale, sx: dx times its sum of codes; the code offset F::kOff / F::kMul).
template <class F>
struct BlockScaledX16 {
  static constexpr int kTokens = kX16Tokens;  // tokens a tile at most
  // Rows r..r+15 of m against NT tokens, H halves (8 rows each) a pass: Y[t * ldy + i] = row r + i . token t.
  // x: 16-bit codes (E = int16_t) or int8 (int8_t).
  template <int NT, int H, class E>
  static void group(const WeightMat& m, int64_t r, const E* xo, int64_t ldo, const float* dx, const float* sx,
                    float* Y, int64_t ldy) {
    const int64_t nb = m.cols / 32;
    const uint8_t* q = m.q + r * nb * 16;  // the group's blocks: 256 bytes each (16 rows x 32 columns)
    const X16ScaleAhead sa(m, r, 256, kX16Ahead);
    for (int h0 = 0; h0 < 2; h0 += H) {
      __m256 y[H][NT];
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t) y[h][t] = _mm256_setzero_ps();
      for (int64_t j = 0; j < nb; ++j) {
        __m256i acc[H][NT];
        _mm_prefetch(sa.at(j), _MM_HINT_T1);  // a block is at most a line of scales
        x16_dot_block<NT, H, typename F::Dec>(q + 256 * j, h0, xo + 32 * j, ldo, acc);
        FT_UNROLL for (int h = 0; h < H; ++h) {
          const __m256 s = F::scales(m, r, j, h0 + h);
          FT_UNROLL for (int t = 0; t < NT; ++t) {
            const int64_t b = t * nb + j;
            y[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][t]), _mm256_mul_ps(s, _mm256_set1_ps(F::kMul * dx[b])), y[h][t]);
            y[h][t] = _mm256_fnmadd_ps(s, _mm256_set1_ps(F::kOff * sx[b]), y[h][t]);
          }
        }
      }
      FT_UNROLL for (int h = 0; h < H; ++h) FT_UNROLL for (int t = 0; t < NT; ++t)
          _mm256_storeu_ps(Y + t * ldy + 8 * (h0 + h), y[h][t]);
    }
  }
};

// Rows [r0, r1) of an X16 matrix m against x.ntok tokens (E: int16_t, Q16Act; int8_t, Q8Act), rows in whole 16s:
// tiles of K::kTokens (4 or 8), then 4, 3, 2, 1 tokens, x of each put by Prep into K's order at xo (rows ldo apart), each
// tile over every group of 16 rows r by K::group<NT, H>(m, r, xo, ldo, dx, sx, Y, ldy) (H halves a pass), which writes
// Y[t * ldy + i] = row r + i . token t.
template <class K, class E, void (*Prep)(const QAct<E>&, int, int64_t, E*, int64_t, float*, float*)>
inline void x16_tiles(const WeightMat& m, int64_t r0, int64_t r1, const QAct<E>& x, float* Y, int64_t ldy) {
  const int64_t cols = m.cols, nb = cols / 32, ldo = cols + 32;  // + 32: no 4 KiB aliasing between tokens
  thread_local FloatBuf bx, bs;
  constexpr int kT = sizeof(E) == 1 && K::kTokens < kX16TokensI8 ? kX16TokensI8 : K::kTokens;
  static_assert(kT == 4 || kT == 8);
  E* xo = reinterpret_cast<E*>(bx.get((kT * ldo * sizeof(E) + 3) / 4));
  float* dx = bs.get(3 * kT * nb);
  float* sx = dx + kT * nb;  // room for a value a half block (Q6_K_X16's int8 Prep)
  for (int64_t t0 = 0; t0 < x.ntok;) {
    const int64_t left = x.ntok - t0;
    const int nt = static_cast<int>(left >= kT ? kT : left > 4 ? 4 : left);  // 8 (zmm), then 4, 3, 2, 1
    Prep(x.rows(t0, nt), nt, cols, xo, ldo, dx, sx);
    for (int64_t r = r0; r < r1; r += 16) {
      float* Yr = Y + t0 * ldy + (r - r0);
      if constexpr (kT == 8) {
        if (nt == 8) {
          K::template group<8, 1>(m, r, xo, ldo, dx, sx, Yr, ldy);
          continue;
        }
      }
      switch (nt) {
        case 4: K::template group<4, 1>(m, r, xo, ldo, dx, sx, Yr, ldy); break;
        case 3: K::template group<3, 1>(m, r, xo, ldo, dx, sx, Yr, ldy); break;
        case 2: K::template group<2, 2>(m, r, xo, ldo, dx, sx, Yr, ldy); break;
        default: K::template group<1, 2>(m, r, xo, ldo, dx, sx, Yr, ldy); break;
      }
    }
    t0 += nt;
  }
}

// x16_tiles over 16-bit x; rows not in whole 16s: x as fp32 (exactly its codes times d) through the scalar twin.
template <class K, X16Prep Prep = x16_prep_i16>
inline void x16_rows_i16(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  if (r0 % 16 || r1 % 16) {  // callers split rows in 16s (linear.cpp, moe_ffn.cpp)
    const int64_t cols = m.cols;
    thread_local FloatBuf bs;
    float* xf = bs.get(x.ntok * cols);
    for (int64_t t = 0; t < x.ntok; ++t)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t b = c / 32, i = c % 32, at = 32 * b + (i % 2 ? 16 : 0) + i / 2;
        xf[t * cols + c] = static_cast<float>(x.q[t * x.ldq + at]) * x.d[t * x.ldb + b];
      }
    return rows_scalar(m, r0, r1, xf, x.ntok, cols, Y, ldy);
  }
  x16_tiles<K, int16_t, Prep>(m, r0, r1, x, Y, ldy);
}

// x16_tiles over int8 x (opt-in int8 activations); rows not in whole 16s: the q8 scalar twin.
template <class K>
inline void x16_rows_i8(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  if (r0 % 16 || r1 % 16) return rows_q8_scalar(m, r0, r1, x, Y, ldy);
  x16_tiles<K, int8_t, x16_prep_i8>(m, r0, r1, x, Y, ldy);
}

}  // namespace
}  // namespace ft
