// AVX2, int8 activations (cpu/q8.h) for MXFP4, NVFP4 and INT4 weights: integer dot products per block of 32.
//
// A block's 16 weight bytes become 32 unsigned codes in one ymm (low nibbles, then high nibbles, the order the
// activations are stored in): u = e2m1 -> 2 * e2m1 + 12 through vpshufb (MXFP4 / NVFP4), or the nibble itself
// (INT4). vpmaddubsw (unsigned codes x signed int8 x, pairs summed in int16: |sum| <= 2 * 24 * 127, no
// saturation), vpmaddwd with ones (int32), vcvtdq2ps, one FMA with the block's scale (weight scale * x scale):
// 5 instructions per 32 weights and token after a 4-instruction decode shared by the tile's tokens. The offset
// o of the codes (12, 8 or the INT4 zero point) comes off once per block: - o * w_scale * d * sum(q).
// The same kernel over 16-bit activations (Q16Act: a bf16 engine's x where there is no bf16 dot product): the
// even and the odd columns' codes zero-extended to 16 bits (3 instructions shared by the tile's tokens), two
// vpmaddwd (|sum| <= 32 * 24 * 2^15 < 2^31). Built for INT4 in groups of 32 only: one Zen 4 core in AVX2 code,
// [73728, 2048] from DRAM, T = 1 / 4, GMAC/s against widening x to fp32: INT4 (groups of 32) 11.6 / 15.9 -> 16.8 /
// 26.1; but INT4 in groups of 128 18.3 / 19.8 -> 15.0 / 26.8, MXFP4 14.8 / 29.1 -> 16.5 / 25.0 and NVFP4 13.5 /
// 22-27 -> 13.3 / 19.0 (their fp32 kernels are the better ones at one token or at four).
#include <immintrin.h>

#include <algorithm>

#include "cpu/arch/x86_avx2.h"  // Avx2::hsum
#include "cpu/q8.h"

namespace ft {
namespace {

// 16 bytes -> 32 nibbles as bytes: [low nibbles of bytes 0..15 | high nibbles of bytes 0..15].
inline __m256i nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0f));
}

// Scale bytes -> 0.5 * their value (the codes are 2 * e2m1), built once at load.
struct ScaleTables {
  float e8m0[256], e4m3[256];
  ScaleTables() {
    for (int i = 0; i < 256; ++i) {
      e8m0[i] = 0.5f * e8m0_to_f32(static_cast<uint8_t>(i));
      e4m3[i] = 0.5f * e4m3_to_f32(static_cast<uint8_t>(i));
    }
  }
};
const ScaleTables kTables;

struct E2m1Codes {  // MXFP4 and NVFP4: 2 * e2m1 + 12 in 0..24
  static constexpr float kOffset = 12.f;
  static __m256i codes(__m256i n) {
    const __m256i lut = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,  //
                                         12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    return _mm256_shuffle_epi8(lut, n);
  }
};
struct Mxfp4 : E2m1Codes {
  static constexpr bool kHalves = false;
  // Scales of block b (columns 32b..) of row r for its two halves, and the codes' offset.
  static void scales(const WeightMat& m, int64_t r, int64_t b, float& s0, float& s1, float& off) {
    s0 = s1 = kTables.e8m0[static_cast<const uint8_t*>(m.scale)[r * m.scale_stride + b]];
    off = kOffset;
  }
};
struct Nvfp4 : E2m1Codes {
  static constexpr bool kHalves = true;  // one e4m3 scale per 16 columns
  static void scales(const WeightMat& m, int64_t r, int64_t b, float& s0, float& s1, float& off) {
    const uint8_t* s = static_cast<const uint8_t*>(m.scale) + r * m.scale_stride;
    s0 = kTables.e4m3[s[2 * b]] * m.global_scale;
    s1 = kTables.e4m3[s[2 * b + 1]] * m.global_scale;
    off = kOffset;
  }
};
template <bool kAsym>
struct Int4 {
  static constexpr bool kHalves = false;
  static __m256i codes(__m256i n) { return n; }
  static void scales(const WeightMat& m, int64_t r, int64_t b, float& s0, float& s1, float& off) {
    const int64_t g = 32 * b / m.group;
    s0 = s1 = static_cast<const float*>(m.scale)[r * m.scale_stride + g];
    off = kAsym ? static_cast<float>(m.zero[r * m.scale_stride + g]) : 8.f;
  }
};

// Software prefetch distance on the weight stream: the integer dot is cheap enough per byte that the
// hardware prefetcher alone falls behind (measured single-thread from DRAM, 2048-column rows: 4.2 GB/s
// without, ~6-7 GB/s at 2 KiB; 0.5 and 4 KiB were worse).
constexpr int kPrefetch = 2048;

// NR rows x NT tokens of the matrix: Y[t * ldy + i] for rows r + i, tokens t0 + t.
template <class D, int NR, int NT, class E>
inline void tile(const WeightMat& m, int64_t r, const QAct<E>& x, int64_t t0, float* Y, int64_t ldy) {
  constexpr bool k16 = sizeof(E) == 2;
  const int64_t nb = m.cols / 32;
  __m256 acc[NR][NT];
  float corr[NR][NT] = {};
  for (int i = 0; i < NR; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xq[NT][k16 ? 2 : 1];  // int16: the block's even columns, then its odd ones
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < (k16 ? 2 : 1); ++h)
        xq[t][h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + (t0 + t) * x.ldq + 32 * b + 16 * h));
    for (int i = 0; i < NR; ++i) {
      const uint8_t* qp = m.q + (r + i) * m.q_stride + 16 * b;
      _mm_prefetch(reinterpret_cast<const char*>(qp) + kPrefetch, _MM_HINT_T0);
      const __m256i u = D::codes(nibbles(qp));
      __m256i ue = u, uo = u;
      if (k16) {
        ue = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(u));
        uo = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(u, 1));
      }
      float s0, s1, off;
      D::scales(m, r + i, b, s0, s1, off);
      for (int t = 0; t < NT; ++t) {
        const int64_t tt = t0 + t;
        const float d = x.d[tt * x.ldb + b];
        const float* sd = x.sd + tt * 2 * x.ldb + 2 * b;
        const __m256 p = _mm256_cvtepi32_ps(
            k16 ? _mm256_add_epi32(_mm256_madd_epi16(ue, xq[t][0]), _mm256_madd_epi16(uo, xq[t][k16 ? 1 : 0]))
                : _mm256_madd_epi16(_mm256_maddubs_epi16(u, xq[t][0]), ones));
        if (D::kHalves) {  // int8: int32 lanes 0,1,4,5 hold columns of the first 16, 2,3,6,7 of the second; int16: 0-3, 4-7
          const __m256 sv = _mm256_blend_ps(_mm256_set1_ps(s0 * d), _mm256_set1_ps(s1 * d), k16 ? 0xf0 : 0xcc);
          acc[i][t] = _mm256_fmadd_ps(p, sv, acc[i][t]);
          corr[i][t] += off * (s0 * sd[0] + s1 * sd[1]);
        } else {
          acc[i][t] = _mm256_fmadd_ps(p, _mm256_set1_ps(s0 * d), acc[i][t]);
          corr[i][t] += off * s0 * (sd[0] + sd[1]);
        }
      }
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int t = 0; t < NT; ++t) Y[t * ldy + i] = Avx2::hsum(acc[i][t]) - corr[i][t];
}

template <class D, class E>
void rows(const WeightMat& m, int64_t r0, int64_t r1, const QAct<E>& x, float* Y, int64_t ldy) {
  for (int64_t t0 = 0; t0 < x.ntok; t0 += 4) {
    const int nt = static_cast<int>(std::min<int64_t>(4, x.ntok - t0));
    float* Yt = Y + t0 * ldy;
    int64_t r = r0;
    switch (nt) {
      case 4: for (; r < r1; ++r) tile<D, 1, 4, E>(m, r, x, t0, Yt + (r - r0), ldy); break;
      case 3: for (; r < r1; ++r) tile<D, 1, 3, E>(m, r, x, t0, Yt + (r - r0), ldy); break;
      case 2:
        for (; r + 2 <= r1; r += 2) tile<D, 2, 2, E>(m, r, x, t0, Yt + (r - r0), ldy);
        for (; r < r1; ++r) tile<D, 1, 2, E>(m, r, x, t0, Yt + (r - r0), ldy);
        break;
      default:
        for (; r + 2 <= r1; r += 2) tile<D, 2, 1, E>(m, r, x, t0, Yt + (r - r0), ldy);
        for (; r < r1; ++r) tile<D, 1, 1, E>(m, r, x, t0, Yt + (r - r0), ldy);
    }
  }
}

}  // namespace

void rows_q8_mxfp4_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows<Mxfp4>(m, r0, r1, x, Y, ldy);
}
void rows_q8_nvfp4_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows<Nvfp4>(m, r0, r1, x, Y, ldy);
}
void rows_q8_int4_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  if (m.fmt == Fmt::INT4_ASYM)
    rows<Int4<true>>(m, r0, r1, x, Y, ldy);
  else
    rows<Int4<false>>(m, r0, r1, x, Y, ldy);
}
void rows_q16_int4_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  if (m.fmt == Fmt::INT4_ASYM)
    rows<Int4<true>>(m, r0, r1, x, Y, ldy);
  else
    rows<Int4<false>>(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
