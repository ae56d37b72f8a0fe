// AVX-512 BF16, GGUF K-quant formats (Q4_K, Q5_K, Q6_K) over bf16 activations (cpu/bf16act.h).
//
// Q5_K and Q6_K: per super-block and row the scales (and negated mins) are decoded once (kquant_rows.h's
// rules); per 32 columns the codes are cut from the block's bytes in registers (nibbles, Q5_K's fifth bit,
// Q6_K's 2-bit high parts: byte shifts and masks, no code buffer), zero-extended to words, looked up in a
// 64-entry bf16 table by `vpermi2w` (entry k: k - kOff, Q6_K's codes being stored + 32), and meet x in one
// `vdpbf16ps`: lane i sums columns 2i and 2i + 1 exactly (every code and every bf16 x product is exact in
// fp32). The sub-block's scale multiplies the partial sums once (Q6_K: lanes 0-7 and 8-15 are two
// sub-blocks of 16).
//
// Q4_K, one row at a time: the word lookup of the nibble formats (x86_avx512bf16_lut4.h) on Q4_K's own
// bytes. A super-block's 128 code bytes are two chunks of 64 bytes; in each, bytes 0..31 hold columns 0..31
// (low nibbles) and 32..63 (high nibbles), bytes 32..63 columns 64..127 likewise: four sub-blocks of 32.
// Read as 32 words, nibble j of word p is column 32 (j & 1) + 2 (p mod 16) + (j >> 1) of the chunk's first
// (p < 16) or second 64 columns, so `vpermw` of (word >> 4j) in a table of the codes 0..15 gives 4 vectors
// of weights, x being put once per call in the matching order (lut4's prep with this word_order).
// `vdpbf16ps` sums words 2i and 2i + 1 into lane i: over vectors 0 and 2, lanes 0..7 lie in sub-block 0 and
// lanes 8..15 in sub-block 2; over vectors 1 and 3, sub-blocks 1 and 3; the two sums meet their scales
// (d * sc, spread by one `vpermps` each) in one FMA each. Per 128 weights 3 shifts, 4 lookups, 4 dot
// products and 2 FMAs, against the register decode's 4 unpacks, 4 widenings, 4 two-table lookups, 4 dot
// products and 4 FMAs (one Zen 5 core, [32768, 2048] from DRAM, T = 1: 19 -> 26 GB/s, with the vector
// scale decode below).
//
// Q4_K and Q5_K's mins come in as -(dmin m) * sum(x over the sub-block), the sums taken once per call. So
// the result differs from the fp32 kernel's on the same bf16 x only in fp32 rounding order.
#include <immintrin.h>

#include <cstring>

#include "cpu/arch/kquant_rows.h"
#include "cpu/arch/x86_avx512bf16_lut4.h"  // word_order, prep, bf16_table

namespace ft {
namespace {

struct F16c {
  static float f16(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }
};

// bf16 words of k - off for k = 0..31 (lo) and 32..63 (hi): exact.
inline void code_tables(int off, __m512i& lo, __m512i& hi) {
  alignas(64) uint16_t v[64];
  for (int k = 0; k < 64; ++k) v[k] = f32_to_bf16(static_cast<float>(k - off));
  lo = _mm512_load_si512(v);
  hi = _mm512_load_si512(v + 32);
}

inline __m256i ld32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i mask8(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }

// Q4_K / Q5_K: the 8 sub-block scales d * sc (lanes 0..7) and negated mins -(dmin * m) (lanes 8..15), the
// values of kq_scales_mins (each one exact product) in one vector. The 6-bit fields are cut in one xmm
// (kq_unpack6's packing): bytes 0..3 of the 12 are scales 0..3 (low 6 bits) and the high 2 bits of scales
// 4..7, bytes 4..7 the same for the mins, bytes 8..11 the low 4 bits of scales 4..7 (low nibble) and mins
// 4..7 (high nibble). Reads 16 bytes from b + 4: the block goes on past its scales.
inline __m512 scales_mins(const uint8_t* b) {
  const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
  // a: scale bytes 0..3, 8..11, mins 4..7, 8..11; h: the bytes whose top 2 bits are fields 4..7's bits 4-5
  const __m128i a = _mm_shuffle_epi8(s, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i h = _mm_shuffle_epi8(s, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i lo = _mm_or_si128(
      _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)),
      _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
  const __m128i v = _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(h, 2), _mm_set1_epi8(0x30)));
  uint32_t dd;  // d, dmin: two f16
  std::memcpy(&dd, b, 4);
  const __m512 ds = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd))));
  const __m512 d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), ds);
  const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)), d);
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(p), _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN)));
}

// Software prefetch of [p, p + n). The tiles prefetch the next tile's rows (the bytes right after theirs) in
// nb slices, one per block step: NR rows read block by block are NR short interleaved streams, which the
// hardware prefetchers follow badly from DRAM (a Q6_K LM head streamed at ~5 GB/s a core without it, ~18
// with it). kquant_rows.h's fp32 tiles did not gain from it (Q6_K 4.4 GB/s from DRAM either way, slower
// from cache), so only these tiles do it.
inline void kq_prefetch(const uint8_t* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 64) __builtin_prefetch(p + i);
}

// Register decoders: scales(b, out) -> the block's scales (and negated mins, out[8..15]); codes(b, c) -> the 32 codes of columns
// c..c+31 (c % 32 == 0) as bytes 0..63 (the value is code - kOff).
struct Q5KR {
  static constexpr int kBytes = 176, kSub = 32, kOff = 0;
  static void scales(const uint8_t* b, float* out) { _mm512_store_ps(out, scales_mins(b)); }
  static __m256i codes(const uint8_t* b, int c) {
    const __m256i v = ld32(b + 48 + 32 * (c / 64));
    const __m256i lo = _mm256_and_si256((c & 32) ? _mm256_srli_epi16(v, 4) : v, mask8(0x0f));
    const __m128i s = _mm_cvtsi32_si128(c / 32);  // sub-block s: bit s of byte l is column 32s + l's fifth bit
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(ld32(b + 16), s), mask8(1));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
  }
};
struct Q6KR {
  static constexpr int kBytes = 210, kSub = 16, kOff = 32;
  static void scales(const uint8_t* b, float* out) {  // d * sc for the 16 sub-blocks of 16 columns
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
    _mm512_store_ps(out, _mm512_mul_ps(sc, _mm512_set1_ps(F16c::f16(b + 208))));
  }
  static __m256i codes(const uint8_t* b, int c) {
    const int n = c / 128, k = (c % 128) / 32;  // half, quarter: nibble (k >> 1) of bytes 64n + 32(k & 1)..
    const __m256i v = ld32(b + 64 * n + 32 * (k & 1));
    const __m256i lo = _mm256_and_si256((k >> 1) ? _mm256_srli_epi16(v, 4) : v, mask8(0x0f));
    const __m128i s = _mm_cvtsi32_si128(2 * k);
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(ld32(b + 128 + 32 * n), s), mask8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
};

// xs[t * ng + g] = sum of X[t, 32g .. 32g + 31] for nt tokens and ng groups (exact products, fp32 sums).
inline void sums32(const uint16_t* X, int64_t ldx, int nt, int64_t ng, float* xs) {
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int t = 0; t < nt; ++t)
    for (int64_t g = 0; g < ng; ++g)
      xs[t * ng + g] = _mm512_reduce_add_ps(
          _mm512_dpbf16_ps(_mm512_setzero_ps(), ones, (__m512bh)_mm512_loadu_si512(X + t * ldx + 32 * g)));
}

template <class D, int NR, int NT>
inline void kqb_tile(const uint8_t* q, int64_t qs, int64_t nb, const uint16_t* X, int64_t ldx, const float* XS,
                     int64_t lds, float* Y, int64_t ldy, __m512i tlo, __m512i thi) {
  constexpr bool kMins = D::kSub == 32;  // Q4_K / Q5_K: a scale and a min per 32 columns; Q6_K: a scale per 16
  alignas(64) float sc[NR][16];  // Q4_K / Q5_K: scales 0..7, negated mins 8..15; Q6_K: 16 scales
  __m512 tot[NR][NT];
  __m256 mins[NR][NT];  // lane j: the sums of -(dmin m_j) * sum(x over sub-block j)
  FT_UNROLL for (int r = 0; r < NR; ++r)
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      tot[r][t] = _mm512_setzero_ps();
      mins[r][t] = _mm256_setzero_ps();
    }
  const int64_t slice = (NR * qs + nb - 1) / nb;  // the next tile's bytes, a slice a block step (kq_prefetch)
  for (int64_t b = 0; b < nb; ++b) {
    kq_prefetch(q + NR * qs + b * slice, slice);
    FT_UNROLL for (int r = 0; r < NR; ++r) D::scales(q + r * qs + b * D::kBytes, sc[r]);
    FT_UNROLL for (int c = 0; c < kQK; c += 32) {
      __m512bh x[NT];
      FT_UNROLL for (int t = 0; t < NT; ++t) x[t] = (__m512bh)_mm512_loadu_si512(X + t * ldx + b * kQK + c);
      FT_UNROLL for (int r = 0; r < NR; ++r) {
        const __m512i idx = _mm512_cvtepu8_epi16(D::codes(q + r * qs + b * D::kBytes, c));
        const __m512bh w = (__m512bh)_mm512_permutex2var_epi16(tlo, idx, thi);
        const __m512 s = kMins ? _mm512_set1_ps(sc[r][c / 32])
                               : _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(sc[r][c / 16]),
                                                      _mm512_set1_ps(sc[r][c / 16 + 1]));
        FT_UNROLL for (int t = 0; t < NT; ++t)
          tot[r][t] = _mm512_fmadd_ps(s, _mm512_dpbf16_ps(_mm512_setzero_ps(), w, x[t]), tot[r][t]);
      }
    }
    if (kMins)
      FT_UNROLL for (int r = 0; r < NR; ++r)
        FT_UNROLL for (int t = 0; t < NT; ++t)
          mins[r][t] = _mm256_fmadd_ps(_mm256_load_ps(sc[r] + 8), _mm256_loadu_ps(XS + t * lds + b * 8), mins[r][t]);
  }
  FT_UNROLL for (int r = 0; r < NR; ++r)
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      const __m512 m = _mm512_insertf32x8(_mm512_setzero_ps(), mins[r][t], 0);
      Y[t * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(tot[r][t], m));
    }
}

constexpr int kNR[5] = {0, 8, 4, 2, 2};  // rows per tile for NT tokens (32 zmm registers)

template <class D, int NT>
inline void kqb_block(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ldx, const float* XS,
                      int64_t lds, float* Y, int64_t ldy, __m512i tlo, __m512i thi) {
  constexpr int NR = kNR[NT];
  const int64_t nb = m.cols / kQK, qs = m.q_stride;
  int64_t r = r0;
  for (; r + NR <= r1; r += NR)
    kqb_tile<D, NR, NT>(m.q + r * qs, qs, nb, X, ldx, XS, lds, Y + (r - r0), ldy, tlo, thi);
  for (; r < r1; ++r) kqb_tile<D, 1, NT>(m.q + r * qs, qs, nb, X, ldx, XS, lds, Y + (r - r0), ldy, tlo, thi);
}

template <class D>
inline void kqb_rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                     float* Y, int64_t ldy) {
  __m512i tlo, thi;
  code_tables(D::kOff, tlo, thi);
  const int64_t lds = m.cols / 32;
  thread_local FloatBuf sums;
  float* xs = sums.get(kTokBlock * lds);
  for (int64_t t = 0; t < ntok; t += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, ntok - t));
    const uint16_t* Xt = X + t * ldx;
    if (D::kSub == 32) sums32(Xt, ldx, nt, lds, xs);
    float* Yt = Y + t * ldy;
    switch (nt) {
      case 4: kqb_block<D, 4>(m, r0, r1, Xt, ldx, xs, lds, Yt, ldy, tlo, thi); break;
      case 3: kqb_block<D, 3>(m, r0, r1, Xt, ldx, xs, lds, Yt, ldy, tlo, thi); break;
      case 2: kqb_block<D, 2>(m, r0, r1, Xt, ldx, xs, lds, Yt, ldy, tlo, thi); break;
      default: kqb_block<D, 1>(m, r0, r1, Xt, ldx, xs, lds, Yt, ldy, tlo, thi); break;
    }
  }
}

// Q4_K: the word lookup (header comment).
// Lanes 0..7 from scale a, 8..15 from scale b.
inline __m512i pair(int a, int b) {
  return _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(a), _mm512_set1_epi32(b));
}

template <int NT, int PF>
inline void q4k_row(const uint8_t* q, int64_t nb, __m512i lut, const uint16_t* xp, int64_t ldp, const float* xs,
                int64_t lds, float* Y, int64_t ldy) {
  // The scale of the lanes of vectors 0 + 2 (sub-blocks 4h, 4h + 2) and 1 + 3 (4h + 1, 4h + 3) of chunk h.
  const __m512i s02[2] = {pair(0, 2), pair(4, 6)}, s13[2] = {pair(1, 3), pair(5, 7)};
  __m512 a0[NT], a1[NT];
  __m256 mins[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) {
    a0[t] = a1[t] = _mm512_setzero_ps();
    mins[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = q + 144 * b;
    if (PF) FT_UNROLL for (int i = 0; i < 144 + 63; i += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + PF + i, _MM_HINT_T0);
    const __m512 sm = scales_mins(blk);
    FT_UNROLL for (int h = 0; h < 2; ++h) {
      const __m512i v = _mm512_loadu_si512(blk + 16 + 64 * h);
      __m512bh w[4];
      FT_UNROLL for (int j = 0; j < 4; ++j) w[j] = (__m512bh)_mm512_permutexvar_epi16(j ? _mm512_srli_epi16(v, 4 * j) : v, lut);
      const __m512 s0 = _mm512_permutexvar_ps(s02[h], sm), s1 = _mm512_permutexvar_ps(s13[h], sm);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const uint16_t* x = xp + t * ldp + 256 * b + 128 * h;
        const __m512 d0 = _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), w[0], (__m512bh)_mm512_loadu_si512(x)), w[2],
                                           (__m512bh)_mm512_loadu_si512(x + 64));
        const __m512 d1 = _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), w[1], (__m512bh)_mm512_loadu_si512(x + 32)),
                                           w[3], (__m512bh)_mm512_loadu_si512(x + 96));
        a0[t] = _mm512_fmadd_ps(d0, s0, a0[t]);
        a1[t] = _mm512_fmadd_ps(d1, s1, a1[t]);
      }
    }
    const __m256 nm = _mm512_extractf32x8_ps(sm, 1);
    FT_UNROLL for (int t = 0; t < NT; ++t) mins[t] = _mm256_fmadd_ps(nm, _mm256_loadu_ps(xs + t * lds + 8 * b), mins[t]);
  }
  FT_UNROLL for (int t = 0; t < NT; ++t) {
    const __m512 m = _mm512_insertf32x8(_mm512_setzero_ps(), mins[t], 0);
    Y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0[t], a1[t]), m));
  }
}

template <int NT>
inline void q4k_block(const WeightMat& m, int64_t r0, int64_t r1, __m512i lut, const uint16_t* xp, int64_t ldp,
                  const float* xs, int64_t lds, float* Y, int64_t ldy) {
  constexpr int PF = NT == 1 ? avx512_nib::kAhead : 0;
  const int64_t nb = m.cols / kQK;
  for (int64_t r = r0; r < r1; ++r) q4k_row<NT, PF>(m.q + r * m.q_stride, nb, lut, xp, ldp, xs, lds, Y + (r - r0), ldy);
}

}  // namespace

// Y[t, r - r0] = sum_c W[r, c] * X[t, c] (RowsBf16Fn), W in Q4_K.
void rows_bf16act_q4k_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                 int64_t ldx, float* Y, int64_t ldy) {
  const int64_t ldp = avx512bf16_lut4::padded_ld(m.cols), lds = m.cols / 32;
  thread_local FloatBuf xbuf, sbuf;
  uint16_t* xp = u16_buf(xbuf, kTokBlock * ldp);
  float* xs = sbuf.get(kTokBlock * lds);
  const __m512i lut = avx512bf16_lut4::bf16_table(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i idx[4];
  avx512bf16_lut4::word_order([](int p, int j) { return 32 * (j & 1) + 2 * (p & 15) + (j >> 1); }, idx);
  for (int64_t t0 = 0; t0 < ntok; t0 += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, ntok - t0));
    const uint16_t* Xt = X + t0 * ldx;
    avx512bf16_lut4::prep<false>(Xt, ldx, nt, m.cols, xp, ldp, nullptr, 0, idx);
    sums32(Xt, ldx, nt, lds, xs);
    float* Yt = Y + t0 * ldy;
    switch (nt) {
      case 4: q4k_block<4>(m, r0, r1, lut, xp, ldp, xs, lds, Yt, ldy); break;
      case 3: q4k_block<3>(m, r0, r1, lut, xp, ldp, xs, lds, Yt, ldy); break;
      case 2: q4k_block<2>(m, r0, r1, lut, xp, ldp, xs, lds, Yt, ldy); break;
      default: q4k_block<1>(m, r0, r1, lut, xp, ldp, xs, lds, Yt, ldy); break;
    }
  }
}

void rows_bf16act_q5k_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                 int64_t ldx, float* Y, int64_t ldy) {
  kqb_rows<Q5KR>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_bf16act_q6k_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                 int64_t ldx, float* Y, int64_t ldy) {
  kqb_rows<Q6KR>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
