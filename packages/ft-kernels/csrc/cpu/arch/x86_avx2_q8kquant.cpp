// AVX2, int8 activations (cpu/q8.h: Q8Act) for GGUF's K-quants (Q4_K, Q5_K, Q6_K, Q3_K, Q2_K; layouts in
// cpu/formats.h): integer dot products per 32 columns on the blocks' own bytes (the path for CPUs without AVX-512
// VNNI, where the fp32 K-quant kernel is bound by its 8 products per FMA). The same kernels over 16-bit
// activations (Q16Act: a bf16 engine's x where there is no bf16 dot product) differ only in dot32: a code word's
// even and odd column apart by a mask and a shift, two vpmaddwd.
//
// x is put once per call in natural column order. 32 bytes of a block's nibbles give two ymm of 32 unsigned
// codes, each the 32 columns of one Q4_K / Q5_K sub-block (Q6_K: two sub-blocks of 16) and one activation
// block; Q5_K's fifth bit and Q6_K's high bits are shifted in from the high-bit bytes. vpmaddubsw (codes x
// signed int8 x, pairs summed in int16: |sum| <= 2 * 63 * 127, no saturation), vpmaddwd with ones (int32); the
// int32 dots of 4 sub-blocks are folded into one vector by two rounds of vphaddd (exact), then one conversion
// and one FMA with (weight scale x activation scale) per 128 weights and token (one per 32 cost Q4_K ~45 % of
// a core's time at one token: 25 -> 30 GMAC/s a Zen 4 core in AVX2 code). Q4_K /
// Q5_K mins and Q6_K's code offset 32 come off once per block and token in fp32, from the activations'
// sums d * sum(q) over each 32 (mins) or 16 (Q6_K) columns.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/arch/rows_common.h"  // FT_UNROLL, FloatBuf, kTokBlock
#include "cpu/arch/x86_kq_fields.h"   // kq_fields6
#include "cpu/arch/x86_avx2.h"  // Avx2::hsum
#include "cpu/q8.h"

namespace ft {
namespace {

// Software prefetch distance on the weight stream (as x86_avx2_q8.cpp).
constexpr int kPrefetch = 2048;

// The integer dot of 32 unsigned codes u (one activation block, natural order) with x: int32 lanes 0..3 sum columns
// 0..15 of the block, lanes 4..7 columns 16..31. Int8 x (put in natural order): vpmaddubsw, then vpmaddwd with ones.
// Int16 x (Q16Act's order: the block's even columns, then its odd ones): each 16-bit word of u holds an even and an
// odd column's code, split by a mask and a shift (the same for every token of a tile), two vpmaddwd (|sum| <= 32 *
// 63 * 2^15 < 2^31).
inline __m256i dot32(__m256i u, const int8_t* x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))),
                           _mm256_set1_epi16(1));
}
inline __m256i dot32(__m256i u, const int16_t* x) {
  return _mm256_add_epi32(
      _mm256_madd_epi16(_mm256_and_si256(u, _mm256_set1_epi16(0xff)), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))),
      _mm256_madd_epi16(_mm256_srli_epi16(u, 8), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16))));
}
// The integer dots of 128 columns of codes c[k] (columns 32k..) with x at xp, folded to one vector before the
// conversion: dot32's lanes 0..3 sum columns 32k..32k + 15 (sub-block 2k of 16), lanes 4..7 the next 16, and two
// rounds of vphaddd leave lane i < 4 = sub-block 2i, lane 4 + i = sub-block 2i + 1 (sums of int32: exact).
template <class E>
inline __m256 fold128(const __m256i (&c)[4], const E* xp) {
  return _mm256_cvtepi32_ps(_mm256_hadd_epi32(_mm256_hadd_epi32(dot32(c[0], xp), dot32(c[1], xp + 32)),
                                              _mm256_hadd_epi32(dot32(c[2], xp + 64), dot32(c[3], xp + 96))));
}
// fold128's lane order of the 8 sub-blocks of 16 (as an index into their scales) ...
inline __m256i fold_order() { return _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7); }
// ... and the activation scales of its 4 blocks of 32 columns, d[0..3], in the same lanes.
inline __m256 dx4(const float* d) { return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(d)); }

// Q4_K / Q5_K: sub-block j of 32 columns; qs bytes 32 (j / 2).. hold it in their low (j even) or high nibbles.
template <bool kFive>
struct QnK {
  static constexpr int kBytes = kFive ? 176 : 144;
  // The 8 scales d * sc and negated mins -(dmin * m) of a block (exact products).
  static void scales(const uint8_t* b, __m256& sc, __m256& nm) {
    const __m128i v = kq_fields6(b);
    sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), _mm256_set1_ps(f16_at(b)));
    nm = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))), _mm256_set1_ps(-f16_at(b + 2)));
  }
  // The codes of sub-blocks 2i, 2i + 1 (columns 64i..).
  static void codes(const uint8_t* b, int i, __m256i& c0, __m256i& c1) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + (kFive ? 48 : 16) + 32 * i));
    const __m256i lo4 = _mm256_set1_epi8(0x0f);
    c0 = _mm256_and_si256(v, lo4);
    c1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
    if (kFive) {  // bit 2i (c0) and 2i + 1 (c1) of qh byte l to bit 4 of code byte l
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)), b4 = _mm256_set1_epi8(0x10);
      const int s0 = 4 - 2 * i, s1 = 3 - 2 * i;
      const __m256i h0 = s0 >= 0 ? _mm256_slli_epi16(qh, s0) : _mm256_srli_epi16(qh, -s0);
      const __m256i h1 = s1 >= 0 ? _mm256_slli_epi16(qh, s1) : _mm256_srli_epi16(qh, -s1);
      c0 = _mm256_or_si256(c0, _mm256_and_si256(h0, b4));
      c1 = _mm256_or_si256(c1, _mm256_and_si256(h1, b4));
    }
  }
};

template <class D, int NT, class E>
inline void tile_qnk(const uint8_t* row, int64_t nsb, const E* xn, int64_t ldn, const QAct<E>& x, int64_t t0,
                     const float* m, int64_t ldm, float* Y, int64_t ldy) {
  __m256 acc[NT], mins[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = mins[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* blk = row + D::kBytes * sb;
    FT_UNROLL for (int i = 0; i < D::kBytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetch + i, _MM_HINT_T0);
    __m256 sc, nm;
    D::scales(blk, sc, nm);
    __m256 f[NT];  // d * sc * d_x per sub-block and token
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      f[t] = _mm256_mul_ps(sc, _mm256_loadu_ps(x.d + (t0 + t) * x.ldb + 8 * sb));
      mins[t] = _mm256_fmadd_ps(nm, _mm256_loadu_ps(m + t * ldm + 8 * sb), mins[t]);
    }
    FT_UNROLL for (int g = 0; g < 2; ++g) {  // sub-blocks 4g..4g + 3: their integer dots folded to one vector
      __m256i c[4];
      D::codes(blk, 2 * g, c[0], c[1]);
      D::codes(blk, 2 * g + 1, c[2], c[3]);
      const __m256i idx = _mm256_setr_epi32(4 * g, 4 * g + 1, 4 * g + 2, 4 * g + 3, 4 * g, 4 * g + 1, 4 * g + 2, 4 * g + 3);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        // a sub-block is 32 columns here: fold128's lanes i and 4 + i both hold sub-block 4g + i
        acc[t] = _mm256_fmadd_ps(fold128(c, xn + t * ldn + 256 * sb + 128 * g), _mm256_permutevar8x32_ps(f[t], idx), acc[t]);
      }
    }
  }
  FT_UNROLL for (int t = 0; t < NT; ++t) Y[t * ldy] = Avx2::hsum(_mm256_add_ps(acc[t], mins[t]));
}

// Q6_K, half n (128 columns): ql bytes 64n.. (bytes 0..31: columns 0..31 low nibble, 64..95 high; bytes
// 32..63: 32..63 and 96..127), qh bytes 128 + 32n.. (byte l: bits 0-1, 2-3, 4-5, 6-7 for columns l, l + 32,
// l + 64, l + 96). Codes 0..63; the weight is d * sc * (code - 32).
inline void q6k_codes(const uint8_t* b, int n, __m256i (&c)[4]) {
  const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n));
  const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * n));
  const __m256i lo4 = _mm256_set1_epi8(0x0f), h2 = _mm256_set1_epi8(0x30);
  c[0] = _mm256_or_si256(_mm256_and_si256(q0, lo4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), h2));
  c[1] = _mm256_or_si256(_mm256_and_si256(q1, lo4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), h2));
  c[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), lo4), _mm256_and_si256(qh, h2));
  c[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), lo4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), h2));
}

template <int NT, class E>
inline void tile_q6k(const uint8_t* row, int64_t nsb, const E* xn, int64_t ldn, const QAct<E>& x, int64_t t0,
                     float* Y, int64_t ldy) {
  __m256 acc[NT], off[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = off[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* blk = row + 210 * sb;
    FT_UNROLL for (int i = 0; i < 256; i += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetch + i, _MM_HINT_T0);
    const __m256 d = _mm256_set1_ps(f16_at(blk + 208));
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    const __m256 sc0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8)), d);  // sub-blocks 0..7
    const __m256 sc1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8))), d);
    FT_UNROLL for (int t = 0; t < NT; ++t) {  // the offset: 32 * sum over sub-blocks of d sc * d_x sum(q)
      const float* sd = x.sd + (t0 + t) * 2 * x.ldb + 16 * sb;
      off[t] = _mm256_fmadd_ps(sc0, _mm256_loadu_ps(sd), off[t]);
      off[t] = _mm256_fmadd_ps(sc1, _mm256_loadu_ps(sd + 8), off[t]);
    }
    FT_UNROLL for (int n = 0; n < 2; ++n) {
      __m256i c[4];
      q6k_codes(blk, n, c);
      const __m256 w = _mm256_permutevar8x32_ps(n ? sc1 : sc0, fold_order());
      FT_UNROLL for (int t = 0; t < NT; ++t)
        acc[t] = _mm256_fmadd_ps(fold128(c, xn + t * ldn + 256 * sb + 128 * n),
                                 _mm256_mul_ps(w, dx4(x.d + (t0 + t) * x.ldb + 8 * sb + 4 * n)), acc[t]);
    }
  }
  FT_UNROLL for (int t = 0; t < NT; ++t) Y[t * ldy] = Avx2::hsum(acc[t]) - 32.f * Avx2::hsum(off[t]);
}

// Q3_K / Q2_K (layouts in cpu/formats.h): the weight of a sub-block s of 16 columns is f_s u - o_s with unsigned
// codes u (Q3_K: low + 4 high in 0..7, f = d (sc - 32), o = 4 f; Q2_K: 0..3, f = d sc, o = dmin m). Q3_K's
// 6-bit scales are unpacked by q3k_scales16 (x86_kq_fields.h).
struct Q3K {
  static constexpr int kBytes = 110;
  static void scales(const uint8_t* b, __m256 (&f)[2], __m256 (&o)[2]) {
    const __m128i s = _mm_sub_epi8(q3k_scales16(b), _mm_set1_epi8(32));
    const __m256 d = _mm256_set1_ps(f16_at(b + 108));
    f[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s)), d);
    f[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s, 8))), d);
    o[0] = _mm256_mul_ps(f[0], _mm256_set1_ps(4.f));
    o[1] = _mm256_mul_ps(f[1], _mm256_set1_ps(4.f));
  }
  // Half n (128 columns): c[j] the codes of columns 128n + 32j.. (low bits of byte 32 + 32n + l >> 2j, the
  // high bit bit 4n + j of hmask byte l, moved to bit 2).
  static void codes(const uint8_t* b, int n, __m256i (&c)[4]) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 + 32 * n));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    FT_UNROLL for (int j = 0; j < 4; ++j) {
      const int sh = 4 * n + j - 2;
      const __m256i h = sh >= 0 ? _mm256_srli_epi16(hm, sh) : _mm256_slli_epi16(hm, -sh);
      c[j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), _mm256_and_si256(h, m4));
    }
  }
};

struct Q2K {
  static constexpr int kBytes = 84;
  static void scales(const uint8_t* b, __m256 (&f)[2], __m256 (&o)[2]) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), m = _mm_set1_epi8(0x0f);
    const __m128i sc = _mm_and_si128(v, m), mn = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    const __m256 d = _mm256_set1_ps(f16_at(b + 80)), dm = _mm256_set1_ps(f16_at(b + 82));
    f[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc)), d);
    f[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sc, 8))), d);
    o[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn)), dm);
    o[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(mn, 8))), dm);
  }
  static void codes(const uint8_t* b, int n, __m256i (&c)[4]) {  // (byte 16 + 32n + l >> 2j) & 3
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * n));
    FT_UNROLL for (int j = 0; j < 4; ++j) c[j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3));
  }
};

// Per 32 columns (one activation block; sub-blocks 2k, 2k + 1 in lanes 0..3, 4..7 of the integer dot) one
// conversion and one FMA with f x d_x; the offsets once per block and token: sum over sub-blocks of o d_x sum(q).
template <class D, int NT, class E>
inline void tile_q23(const uint8_t* row, int64_t nsb, const E* xn, int64_t ldn, const QAct<E>& x, int64_t t0,
                     float* Y, int64_t ldy) {
  __m256 acc[NT], off[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) acc[t] = off[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* blk = row + D::kBytes * sb;
    FT_UNROLL for (int i = 0; i < D::kBytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetch + i, _MM_HINT_T0);
    __m256 f[2], o[2];
    D::scales(blk, f, o);
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      const float* sd = x.sd + (t0 + t) * 2 * x.ldb + 16 * sb;
      off[t] = _mm256_fmadd_ps(o[0], _mm256_loadu_ps(sd), off[t]);
      off[t] = _mm256_fmadd_ps(o[1], _mm256_loadu_ps(sd + 8), off[t]);
    }
    FT_UNROLL for (int n = 0; n < 2; ++n) {
      __m256i c[4];
      D::codes(blk, n, c);
      const __m256 w = _mm256_permutevar8x32_ps(f[n], fold_order());
      FT_UNROLL for (int t = 0; t < NT; ++t)
        acc[t] = _mm256_fmadd_ps(fold128(c, xn + t * ldn + 256 * sb + 128 * n),
                                 _mm256_mul_ps(w, dx4(x.d + (t0 + t) * x.ldb + 8 * sb + 4 * n)), acc[t]);
    }
  }
  FT_UNROLL for (int t = 0; t < NT; ++t) Y[t * ldy] = Avx2::hsum(acc[t]) - Avx2::hsum(off[t]);
}

// Q8Act's blocks of 32 (even columns, then odd) back in natural order: xn [nt][cols].
inline void prep(const Q8Act& a, int64_t t0, int nt, int64_t cols, int8_t* xn) {
  for (int t = 0; t < nt; ++t) {
    const int8_t* q = a.q + (t0 + t) * a.ldq;
    for (int64_t b = 0; b < cols / 32; ++b) {
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b));
      const __m128i o = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * b + 16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(xn + t * cols + 32 * b), _mm_unpacklo_epi8(e, o));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(xn + t * cols + 32 * b + 16), _mm_unpackhi_epi8(e, o));
    }
  }
}

// The mins' factor of the tokens: m [nt][cols / 32] = d * sum(q) per block.
template <class E>
inline void sums(const QAct<E>& a, int64_t t0, int nt, int64_t cols, float* m) {
  for (int t = 0; t < nt; ++t) {
    const float* sd = a.sd + (t0 + t) * 2 * a.ldb;
    for (int64_t b = 0; b < cols / 32; ++b) m[t * (cols / 32) + b] = sd[2 * b] + sd[2 * b + 1];
  }
}

template <class E, class Tile>
void rows(const WeightMat& w, int64_t r0, int64_t r1, const QAct<E>& x, float* Y, int64_t ldy, Tile tile) {
  const int64_t cols = w.cols, nsb = cols / kQK;
  thread_local FloatBuf bx, bm;
  float* m = bm.get(kTokBlock * cols / 32);
  for (int64_t t0 = 0; t0 < x.ntok; t0 += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, x.ntok - t0));
    sums(x, t0, nt, cols, m);
    const E* xn = x.q + t0 * x.ldq;  // int16: read where it lies
    int64_t ldn = x.ldq;
    if constexpr (sizeof(E) == 1) {  // int8: blocks put back in natural order
      int8_t* buf = reinterpret_cast<int8_t*>(bx.get(kTokBlock * cols / 4));
      prep(x, t0, nt, cols, buf);
      xn = buf, ldn = cols;
    }
    for (int64_t r = r0; r < r1; ++r) tile(w.q + r * w.q_stride, nsb, xn, ldn, t0, nt, m, Y + t0 * ldy + (r - r0), ldy);
  }
}

template <class D, class E>
void rows_qnk(const WeightMat& w, int64_t r0, int64_t r1, const QAct<E>& x, float* Y, int64_t ldy) {
  rows(w, r0, r1, x, Y, ldy, [&](const uint8_t* row, int64_t nsb, const E* xn, int64_t ldn, int64_t t0, int nt,
                                 const float* m, float* y, int64_t ldy_) {
    const int64_t ldm = nsb * (kQK / 32);
    switch (nt) {
      case 4: tile_qnk<D, 4, E>(row, nsb, xn, ldn, x, t0, m, ldm, y, ldy_); break;
      case 3: tile_qnk<D, 3, E>(row, nsb, xn, ldn, x, t0, m, ldm, y, ldy_); break;
      case 2: tile_qnk<D, 2, E>(row, nsb, xn, ldn, x, t0, m, ldm, y, ldy_); break;
      default: tile_qnk<D, 1, E>(row, nsb, xn, ldn, x, t0, m, ldm, y, ldy_); break;
    }
  });
}

template <class D, class E>
void rows_q23(const WeightMat& w, int64_t r0, int64_t r1, const QAct<E>& x, float* Y, int64_t ldy) {
  rows(w, r0, r1, x, Y, ldy, [&](const uint8_t* row, int64_t nsb, const E* xn, int64_t ldn, int64_t t0, int nt,
                                 const float*, float* y, int64_t ldy_) {
    switch (nt) {
      case 4: tile_q23<D, 4, E>(row, nsb, xn, ldn, x, t0, y, ldy_); break;
      case 3: tile_q23<D, 3, E>(row, nsb, xn, ldn, x, t0, y, ldy_); break;
      case 2: tile_q23<D, 2, E>(row, nsb, xn, ldn, x, t0, y, ldy_); break;
      default: tile_q23<D, 1, E>(row, nsb, xn, ldn, x, t0, y, ldy_); break;
    }
  });
}

template <class E>
void rows_q6k(const WeightMat& m, int64_t r0, int64_t r1, const QAct<E>& x, float* Y, int64_t ldy) {
  rows(m, r0, r1, x, Y, ldy, [&](const uint8_t* row, int64_t nsb, const E* xn, int64_t ldn, int64_t t0, int nt,
                                 const float*, float* y, int64_t ldy_) {
    switch (nt) {
      case 4: tile_q6k<4, E>(row, nsb, xn, ldn, x, t0, y, ldy_); break;
      case 3: tile_q6k<3, E>(row, nsb, xn, ldn, x, t0, y, ldy_); break;
      case 2: tile_q6k<2, E>(row, nsb, xn, ldn, x, t0, y, ldy_); break;
      default: tile_q6k<1, E>(row, nsb, xn, ldn, x, t0, y, ldy_); break;
    }
  });
}

}  // namespace

void rows_q8_q3k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows_q23<Q3K>(m, r0, r1, x, Y, ldy);
}
void rows_q8_q2k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows_q23<Q2K>(m, r0, r1, x, Y, ldy);
}
void rows_q8_q4k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows_qnk<QnK<false>>(m, r0, r1, x, Y, ldy);
}
void rows_q8_q5k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows_qnk<QnK<true>>(m, r0, r1, x, Y, ldy);
}
void rows_q8_q6k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q8Act& x, float* Y, int64_t ldy) {
  rows_q6k(m, r0, r1, x, Y, ldy);
}
void rows_q16_q3k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  rows_q23<Q3K>(m, r0, r1, x, Y, ldy);
}
void rows_q16_q2k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  rows_q23<Q2K>(m, r0, r1, x, Y, ldy);
}
void rows_q16_q4k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  rows_qnk<QnK<false>>(m, r0, r1, x, Y, ldy);
}
void rows_q16_q5k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  rows_qnk<QnK<true>>(m, r0, r1, x, Y, ldy);
}
void rows_q16_q6k_avx2(const WeightMat& m, int64_t r0, int64_t r1, const Q16Act& x, float* Y, int64_t ldy) {
  rows_q6k(m, r0, r1, x, Y, ldy);
}

}  // namespace ft
