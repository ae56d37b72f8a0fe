// AVX-512 BF16, GGUF K-quant formats (Q4_K, Q5_K, Q6_K; Q3_K, Q2_K at the end) over bf16 activations (cpu/bf16act.h), one row at
// a time: the word lookup of the nibble formats (x86_avx512bf16_lut4.h) on the K-quants' own bytes.
//
// A super-block of 256 columns is two chunks of 128. One 64-byte load of a chunk's 4-bit parts, read as 32
// words, holds 128 nibbles; nibble j of word p is column col(p, j) of the chunk (per format below), so
// `vpermw` of (word >> 4j) in a bf16 table gives 4 vectors of weights, x being put once per call in the
// matching order (lut4's prep with the format's word_order). Q5_K's fifth bit and Q6_K's two high bits are
// shifted from a broadcast of the block's high-bit bytes to bit 4 of each word and joined under the
// nibble by one ternary-logic op: a 5-bit index (`vpermw`, table k) or a 6-bit one (`vpermi2w`, k - 32).
// `vdpbf16ps` sums words 2i and 2i + 1 into fp32 lane i; the lanes of vectors 0 and 2, and of 1 and 3, lie
// in sub-blocks whose scales (d * sc, one `vpermps` each from the block's scale vector) multiply the two
// partial sums in one FMA each. Q4_K and Q5_K's mins come in once per block as -(dmin m) * sum(x over the
// sub-block), the sums taken once per call. Every code and every bf16 product is exact in fp32, so the
// result differs from the fp32 kernel's on the same bf16 x only in fp32 rounding order.
//
// Per 128 Q4_K weights: 3 shifts, 4 lookups, 4 dot products, 2 FMAs -- against 4 unpacks, 4 widenings, 4
// two-table lookups, 4 dot products and 4 FMAs for the register decode per 32 columns this replaced. One
// Zen 5 core, [32768, 2048] from DRAM, T = 1: Q4_K 19 -> 24-27 GB/s, Q5_K 17 -> 25, Q6_K 21 -> 28.
//
// From 7 tokens a call (prefill: the tokens routed to one expert) all but a tail of fewer than 7 go through the
// tokens-in-lanes kernel (x86_avx512bf16_tokgemm.h: one scale FMA per 16 products, not per 2), with this file's
// decoders QnKT / Q6KT. One Zen 4 core, [1024, 2048] Q4_K in cache: 16 tokens 48 -> 78 GMAC/s, 8 tokens 48 -> 54.
#include <immintrin.h>

#include <cstring>

#include "cpu/arch/kquant_rows.h"
#include "cpu/arch/x86_avx512_kq_scales.h"  // kq_scale_vec, q6k_scale_vec
#include "cpu/arch/x86_avx512bf16_lut4.h"  // word_order, prep, bf16_table
#include "cpu/arch/x86_avx512bf16_tokgemm.h"  // the prefill kernel (tokens in the lanes)

namespace ft {
namespace {

// bf16 words of k - off for k = 0..31 (lo) and 32..63 (hi): exact.
inline void code_tables(int off, __m512i& lo, __m512i& hi) {
  alignas(64) uint16_t v[64];
  for (int k = 0; k < 64; ++k) v[k] = f32_to_bf16(static_cast<float>(k - off));
  lo = _mm512_load_si512(v);
  hi = _mm512_load_si512(v + 32);
}

// xs[t * ng + g] = sum of X[t, 32g .. 32g + 31] for nt tokens and ng groups (exact products, fp32 sums).
inline void sums32(const uint16_t* X, int64_t ldx, int nt, int64_t ng, float* xs) {
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int t = 0; t < nt; ++t)
    for (int64_t g = 0; g < ng; ++g)
      xs[t * ng + g] = _mm512_reduce_add_ps(
          _mm512_dpbf16_ps(_mm512_setzero_ps(), ones, (__m512bh)_mm512_loadu_si512(X + t * ldx + 32 * g)));
}

// Decoders W: col(p, j) (word_order); scale_of(h, j, i): the scale (sub-block) of lane i of vectors j and
// j + 2 in chunk h; tables(lo, hi); scales(b): the block's scales (and negated mins, lanes 8..15) as one
// vector; weights(b, h, lo, hi, w): the 4 weight vectors of chunk h.
//
// Q4_K and Q5_K (kFive), chunk h: code bytes 64h.. (from 16, Q5_K 48): bytes 0..31 hold columns 0..31 (low
// nibbles) and 32..63 (high), bytes 32..63 columns 64..127 likewise -- sub-blocks 4h..4h+3 of 32; nibble j
// of word p is column 64 (p >> 4) + 32 (j & 1) + 2 (p mod 16) + (j >> 1), in sub-block
// 4h + 2 (p >> 4) + (j & 1). Q5_K's fifth bit of that column is bit (sub-block) of qh byte
// 2 (p mod 16) + (j >> 1): bit 8 (j >> 1) + 4h + 2 (p >> 4) + (j & 1) of qh's word p mod 16, at
// 8 (j >> 1) + 4h + (j & 1) once words 16..31 of the broadcast are shifted right by 2.
template <bool kFive>
struct QnKW {
  static constexpr int kBytes = kFive ? 176 : 144, kCodes = kFive ? 48 : 16;
  static constexpr bool kMins = true;
  static int col(int p, int j) { return 64 * (p >> 4) + 32 * (j & 1) + 2 * (p & 15) + (j >> 1); }
  static int scale_of(int h, int j, int i) { return 4 * h + 2 * (i >> 3) + j; }
  static void tables(__m512i& lo, __m512i& hi) {  // codes 0..31 (Q4_K: 0..15 twice; vpermw reads 5 bits)
    if (kFive) {
      code_tables(0, lo, hi);
    } else {
      lo = avx512bf16_lut4::bf16_table(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
      hi = lo;
    }
  }
  static __m512 scales(const uint8_t* b) { return kq_scale_vec(b); }
  static void weights(const uint8_t* b, int h, __m512i lo, __m512i, __m512bh (&w)[4]) {
    const __m512i v = _mm512_loadu_si512(b + kCodes + 64 * h);
    __m512i qh = _mm512_setzero_si512();
    if (kFive) {
      qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
      qh = _mm512_mask_srli_epi16(qh, 0xffff0000u, qh, 2);
    }
    FT_UNROLL for (int j = 0; j < 4; ++j) {
      __m512i idx = j ? _mm512_srli_epi16(v, 4 * j) : v;
      if (kFive) {  // the fifth bit to bit 4: from bit 8 (j >> 1) + 4h + (j & 1)
        const int s = 8 * (j >> 1) + 4 * h + (j & 1) - 4;
        const __m512i hb = s >= 0 ? _mm512_srli_epi16(qh, s) : _mm512_slli_epi16(qh, -s);
        idx = _mm512_ternarylogic_epi32(idx, hb, _mm512_set1_epi16(0x000f), 0xe4);  // nibble ? idx : hb, per bit
      }
      w[j] = (__m512bh)_mm512_permutexvar_epi16(idx, lo);
    }
  }
};

// Q6_K, half h of a super-block: ql bytes 64h.. (byte l < 32: low nibble column l, high l + 64; byte l >= 32:
// column l, l + 64), qh bytes 128 + 32h.. (byte l: bits 0-1, 4-5 for ql byte l's nibbles, bits 2-3, 6-7 for
// ql byte l + 32's). Word p, nibble j is column 2p + (j >> 1) + 64 (j & 1); its 2 high bits sit at bit
// 4j (p < 16) or 4j + 2 (p >= 16) of qh's word p mod 16, which a broadcast of qh's 32 bytes, shifted right
// by 2 in words 16..31, puts at 4j for every p. One ternary-logic op then joins them under the nibble as
// a 6-bit index into the 64-entry table (entry k: k - 32).
struct Q6KW {
  static constexpr int kBytes = 210;
  static constexpr bool kMins = false;
  static int col(int p, int j) { return 2 * p + (j >> 1) + 64 * (j & 1); }
  static int scale_of(int h, int j, int i) { return 8 * h + 4 * j + (i >> 2); }  // sub-blocks of 16
  static void tables(__m512i& lo, __m512i& hi) { code_tables(32, lo, hi); }
  static __m512 scales(const uint8_t* b) { return q6k_scale_vec(b); }
  static void weights(const uint8_t* b, int h, __m512i lo, __m512i hi, __m512bh (&w)[4]) {
    const __m512i v = _mm512_loadu_si512(b + 64 * h);
    __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
    qh = _mm512_mask_srli_epi16(qh, 0xffff0000u, qh, 2);
    const __m512i nib = _mm512_set1_epi16(0x000f);
    const __m512i hb[4] = {_mm512_slli_epi16(qh, 4), qh, _mm512_srli_epi16(qh, 4), _mm512_srli_epi16(qh, 8)};
    FT_UNROLL for (int j = 0; j < 4; ++j) {
      // bits 0-3 from the nibble, 4-5 from qh (vpermi2w reads 6 index bits): nib ? a : b, per bit
      const __m512i idx = _mm512_ternarylogic_epi32(j ? _mm512_srli_epi16(v, 4 * j) : v, hb[j], nib, 0xe4);
      w[j] = (__m512bh)_mm512_permutex2var_epi16(lo, idx, hi);
    }
  }
};

// Decoders of the prefill kernel (x86_avx512bf16_tokgemm.h): a block's codes as bf16 in column order.
// Q4_K / Q5_K: code bytes 32j.. hold columns 64j + l (low nibble) and 64j + 32 + l (high); Q5_K's fifth bit
// of those is bit 2j (2j + 1) of qh byte l.
template <bool kFive>
struct QnKT {
  static constexpr int kCols = kQK, kSub = 32;
  static constexpr bool kMins = true;
  static constexpr int kMin16 = 9, kMin8 = 7;
  static void decode(const WeightMat& m, int64_t row, int64_t blk, uint16_t* codes, float* sm) {
    const uint8_t* b = m.q + row * m.q_stride + blk * QnKW<kFive>::kBytes;
    _mm512_storeu_ps(sm, kq_scale_vec(b));
    __m512i lo, hi;
    QnKW<kFive>::tables(lo, hi);
    const __m512i nib = _mm512_set1_epi16(0x000f);
    const __m512i qh = kFive ? _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)))
                             : _mm512_setzero_si512();
    FT_UNROLL for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + QnKW<kFive>::kCodes + 32 * j)));
      __m512i i0 = v, i1 = _mm512_srli_epi16(v, 4);
      if (kFive) {  // bit 2j (2j + 1) of qh to bit 4, under the nibble (vpermw reads 5 index bits)
        const __m512i h0 = 2 * j <= 4 ? _mm512_slli_epi16(qh, 4 - 2 * j) : _mm512_srli_epi16(qh, 2 * j - 4);
        const __m512i h1 = 2 * j + 1 <= 4 ? _mm512_slli_epi16(qh, 3 - 2 * j) : _mm512_srli_epi16(qh, 2 * j - 3);
        i0 = _mm512_ternarylogic_epi32(i0, h0, nib, 0xe4);
        i1 = _mm512_ternarylogic_epi32(i1, h1, nib, 0xe4);
      } else {
        i0 = _mm512_and_si512(i0, nib);
      }
      _mm512_storeu_si512(codes + 64 * j, _mm512_permutexvar_epi16(i0, lo));
      _mm512_storeu_si512(codes + 64 * j + 32, _mm512_permutexvar_epi16(i1, lo));
    }
  }
};

// Q6_K, half n: ql bytes 64n + l (l < 32) hold columns 128n + l (low nibble) and + 64 (high), bytes 64n + 32 + l
// columns 128n + 32 + l and + 96; qh byte 128 + 32n + l bits 2u, 2u + 1: the high bits of column 128n + 32u + l.
struct Q6KT {
  static constexpr int kCols = kQK, kSub = 16;
  static constexpr bool kMins = false;
  static constexpr int kMin16 = 9, kMin8 = 7;
  static void decode(const WeightMat& m, int64_t row, int64_t blk, uint16_t* codes, float* sm) {
    const uint8_t* b = m.q + row * m.q_stride + blk * Q6KW::kBytes;
    _mm512_storeu_ps(sm, q6k_scale_vec(b));
    __m512i lo, hi;
    Q6KW::tables(lo, hi);
    const __m512i nib = _mm512_set1_epi16(0x000f);
    FT_UNROLL for (int n = 0; n < 2; ++n) {
      const __m512i a = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n)));
      const __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n + 32)));
      const __m512i h = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * n)));
      const __m512i idx[4] = {_mm512_ternarylogic_epi32(a, _mm512_slli_epi16(h, 4), nib, 0xe4),
                              _mm512_ternarylogic_epi32(c, _mm512_slli_epi16(h, 2), nib, 0xe4),
                              _mm512_ternarylogic_epi32(_mm512_srli_epi16(a, 4), h, nib, 0xe4),
                              _mm512_ternarylogic_epi32(_mm512_srli_epi16(c, 4), _mm512_srli_epi16(h, 2), nib, 0xe4)};
      FT_UNROLL for (int u = 0; u < 4; ++u) _mm512_storeu_si512(codes + 128 * n + 32 * u, _mm512_permutex2var_epi16(lo, idx[u], hi));
    }
  }
};

template <class W, int NT, int PF>
inline void word_row(const uint8_t* q, int64_t nb, __m512i lo, __m512i hi, const __m512i (&si)[2][2],
                     const uint16_t* xp, int64_t ldp, const float* xs, int64_t lds, float* Y, int64_t ldy) {
  __m512 a0[NT], a1[NT];
  __m256 mins[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) {
    a0[t] = a1[t] = _mm512_setzero_ps();
    mins[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = q + W::kBytes * b;
    if (PF) FT_UNROLL for (int i = 0; i < W::kBytes + 63; i += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + PF + i, _MM_HINT_T0);
    const __m512 sm = W::scales(blk);
    FT_UNROLL for (int h = 0; h < 2; ++h) {
      __m512bh w[4];
      W::weights(blk, h, lo, hi, w);
      const __m512 s0 = _mm512_permutexvar_ps(si[h][0], sm), s1 = _mm512_permutexvar_ps(si[h][1], sm);
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
    if (W::kMins) {
      const __m256 nm = _mm512_extractf32x8_ps(sm, 1);
      FT_UNROLL for (int t = 0; t < NT; ++t) mins[t] = _mm256_fmadd_ps(nm, _mm256_loadu_ps(xs + t * lds + 8 * b), mins[t]);
    }
  }
  FT_UNROLL for (int t = 0; t < NT; ++t) {
    __m512 s = _mm512_add_ps(a0[t], a1[t]);
    if (W::kMins) s = _mm512_add_ps(s, _mm512_insertf32x8(_mm512_setzero_ps(), mins[t], 0));
    Y[t * ldy] = _mm512_reduce_add_ps(s);
  }
}

template <class W, int NT>
inline void word_block(const WeightMat& m, int64_t r0, int64_t r1, __m512i lo, __m512i hi, const __m512i (&si)[2][2],
                       const uint16_t* xp, int64_t ldp, const float* xs, int64_t lds, float* Y, int64_t ldy) {
  constexpr int PF = NT == 1 ? avx512_nib::kAhead : 0;
  const int64_t nb = m.cols / kQK;
  for (int64_t r = r0; r < r1; ++r)
    word_row<W, NT, PF>(m.q + r * m.q_stride, nb, lo, hi, si, xp, ldp, xs, lds, Y + (r - r0), ldy);
}

template <class W>
inline void word_rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                      float* Y, int64_t ldy) {
  const int64_t ldp = avx512bf16_lut4::padded_ld(m.cols), lds = m.cols / 32;
  thread_local FloatBuf xbuf, sbuf;
  uint16_t* xp = u16_buf(xbuf, kTokBlock * ldp);
  float* xs = W::kMins ? sbuf.get(kTokBlock * lds) : nullptr;
  __m512i lo, hi, si[2][2];
  W::tables(lo, hi);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 2; ++j) {
      alignas(64) int32_t v[16];
      for (int i = 0; i < 16; ++i) v[i] = W::scale_of(h, j, i);
      si[h][j] = _mm512_load_si512(v);
    }
  const avx512bf16_lut4::WordOrder order = avx512bf16_lut4::word_order(W::col);
  for (int64_t t0 = 0; t0 < ntok; t0 += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, ntok - t0));
    const uint16_t* Xt = X + t0 * ldx;
    avx512bf16_lut4::prep<false>(Xt, ldx, nt, m.cols, xp, ldp, nullptr, 0, order);
    if (W::kMins) sums32(Xt, ldx, nt, lds, xs);
    float* Yt = Y + t0 * ldy;
    switch (nt) {
      case 4: word_block<W, 4>(m, r0, r1, lo, hi, si, xp, ldp, xs, lds, Yt, ldy); break;
      case 3: word_block<W, 3>(m, r0, r1, lo, hi, si, xp, ldp, xs, lds, Yt, ldy); break;
      case 2: word_block<W, 2>(m, r0, r1, lo, hi, si, xp, ldp, xs, lds, Yt, ldy); break;
      default: word_block<W, 1>(m, r0, r1, lo, hi, si, xp, ldp, xs, lds, Yt, ldy); break;
    }
  }
}

// The prefill kernel for the first tokens (all but a tail of fewer than 7), the row-wise one for the rest.
template <class T, class W>
inline void bf16_rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx, float* Y,
                      int64_t ldy) {
  avx512bf16_tokgemm::then_rows<T>(m, r0, r1, X, ntok, ldx, Y, ldy, [&](const uint16_t* Xr, int64_t nr, float* Yr) {
    word_rows<W>(m, r0, r1, Xr, nr, ldx, Yr, ldy);
  });
}

// ---- Q3_K and Q2_K: 2-bit fields, 8 per word (cpu/formats.h) ----
//
// One 64-byte load of a block's 2-bit codes, read as 32 words, holds all 256 columns: field k (bits 2k, 2k + 1)
// of word p is column 128 (p >> 4) + 32 (k & 3) + 2 (p mod 16) + (k >> 2) (byte 2 (p mod 16) + (k >> 2) of half
// p >> 4). `vpermw` of (word >> 2k) in a 32-entry bf16 table periodic in its low 2 (Q2_K: q) or 3 bits (Q3_K:
// q - 4 with the high bit at bit 2) gives 8 vectors of weights; x is put in the matching order once per call
// (prep2). Q3_K's high bit of that column is bit 4 (p >> 4) + (k & 3) of hmask byte 2 (p mod 16) + (k >> 2): bit
// 8 (k >> 2) + (k & 3) of hmask's word p mod 16 once words 16..31 of its broadcast are shifted right by 4; one
// ternary-logic op puts it under the 2 code bits. `vdpbf16ps` lane i of vector k sums two columns of sub-block
// (16 columns) 8 (i >> 3) + 2 (k & 3) + ((i >> 2) & 1): vectors k and k + 4 share their scales (one `vpermps`
// from the block's 16 scales), so two dot products meet one FMA. Q2_K's mins come in once per block as one
// 16-lane FMA of -(dmin m) with x's sums over the 16 sub-blocks (taken once per call). Codes, bf16 products and
// scales are exact in fp32, as for the other K-quants.
inline int k2_col(int p, int k) { return 128 * (p >> 4) + 32 * (k & 3) + 2 * (p & 15) + (k >> 2); }
inline int k2_scale_of(int k, int i) { return 8 * (i >> 3) + 2 * (k & 3) + ((i >> 2) & 1); }

// bf16 table of 32 entries: v(i) for i = 0..31.
template <class F>
inline __m512i table32(F v) {
  alignas(64) uint16_t t[32];
  for (int i = 0; i < 32; ++i) t[i] = f32_to_bf16(static_cast<float>(v(i)));
  return _mm512_load_si512(t);
}

// Q3_K's 16 sub-block scales d (sc - 32) (exact: f16 times a 6-bit integer). Reads bytes 94..109 of the block
// (the scales at 96..107, d at 108): no byte past it.
inline __m512 q3k_scale_vec(const uint8_t* b) {
  const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 94));
  // low 4 bits of scale k: byte 2 + k % 8, nibble k / 8; high 2: byte 10 + k % 4, bits 2 (k / 4)
  const __m512i a = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(s, _mm_setr_epi8(2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9)));
  const __m512i h = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(s, _mm_setr_epi8(10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13)));
  const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(a, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4)),
                                      _mm512_set1_epi32(15));
  const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(h, _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6)),
                                      _mm512_set1_epi32(3));
  const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
  const float d = _cvtsh_ss(static_cast<uint16_t>(b[108] | (b[109] << 8)));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_set1_ps(d));
}

// Q2_K's 16 sub-block scales d sc (scale) and negated mins -(dmin m) (mins).
inline void q2k_scale_vecs(const uint8_t* b, __m512& scale, __m512& mins) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const float d = _cvtsh_ss(static_cast<uint16_t>(b[80] | (b[81] << 8)));
  const float dmin = _cvtsh_ss(static_cast<uint16_t>(b[82] | (b[83] << 8)));
  scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15))), _mm512_set1_ps(d));
  mins = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), _mm512_set1_ps(-dmin));
}

// Decoders of the row-wise 2-bit kernel: table() (32 bf16 words), scales(b, sc, nm), weights(b, tab, w[8]).
struct Q3KW2 {
  static constexpr int kBytes = 110;
  static constexpr bool kMins = false;
  static __m512i table() { return table32([](int i) { return (i & 7) - 4; }); }
  static void scales(const uint8_t* b, __m512& sc, __m512&) { sc = q3k_scale_vec(b); }
  static void weights(const uint8_t* b, __m512i tab, __m512bh (&w)[8]) {
    const __m512i v = _mm512_loadu_si512(b + 32);
    __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    hm = _mm512_mask_srli_epi16(hm, 0xffff0000u, hm, 4);
    const __m512i two = _mm512_set1_epi16(0x0003);
    FT_UNROLL for (int k = 0; k < 8; ++k) {
      const int s = 8 * (k >> 2) + (k & 3) - 2;  // the high bit's place, less its target bit 2
      const __m512i hb = s >= 0 ? _mm512_srli_epi16(hm, s) : _mm512_slli_epi16(hm, -s);
      const __m512i idx = _mm512_ternarylogic_epi32(k ? _mm512_srli_epi16(v, 2 * k) : v, hb, two, 0xe4);  // two ? v : hb
      w[k] = (__m512bh)_mm512_permutexvar_epi16(idx, tab);
    }
  }
};

struct Q2KW2 {
  static constexpr int kBytes = 84;
  static constexpr bool kMins = true;
  static __m512i table() { return table32([](int i) { return i & 3; }); }
  static void scales(const uint8_t* b, __m512& sc, __m512& nm) { q2k_scale_vecs(b, sc, nm); }
  static void weights(const uint8_t* b, __m512i tab, __m512bh (&w)[8]) {
    const __m512i v = _mm512_loadu_si512(b + 16);
    FT_UNROLL for (int k = 0; k < 8; ++k) w[k] = (__m512bh)_mm512_permutexvar_epi16(k ? _mm512_srli_epi16(v, 2 * k) : v, tab);
  }
};

// x of nt tokens in k2_col's order: xp[t * ldp + 256 b + 32 k + p] = X[t, 256 b + k2_col(p, k)] (vector k's words
// p < 16 come from x's 32 columns 32 (k & 3).., p >= 16 from 128 + 32 (k & 3)..); xs (mins): xs[t * lds + 16 b + s]
// the fp32 sum of X[t] over sub-block s of block b (vdpbf16ps against ones: exact products).
inline void prep2(const uint16_t* X, int64_t ldx, int nt, int64_t cols, uint16_t* xp, int64_t ldp, float* xs,
                  int64_t lds) {
  __m512i idx[2];
  for (int h = 0; h < 2; ++h) {
    alignas(64) uint16_t v[32];
    for (int p = 0; p < 32; ++p) v[p] = static_cast<uint16_t>(2 * (p & 15) + h + 32 * (p >> 4));
    idx[h] = _mm512_load_si512(v);
  }
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int t = 0; t < nt; ++t)
    for (int64_t c = 0; c < cols; c += kQK) {
      const uint16_t* x = X + t * ldx + c;
      __m512i in[8];
      FT_UNROLL for (int i = 0; i < 8; ++i) in[i] = _mm512_loadu_si512(x + 32 * i);
      FT_UNROLL for (int k = 0; k < 8; ++k)
        _mm512_storeu_si512(xp + t * ldp + c + 32 * k, _mm512_permutex2var_epi16(in[k & 3], idx[k >> 2], in[4 + (k & 3)]));
      if (!xs) continue;
      alignas(64) float s[16];
      FT_UNROLL for (int i = 0; i < 8; ++i) {  // lanes 0..7: sub-block 2i, 8..15: 2i + 1
        _mm512_store_ps(s, _mm512_dpbf16_ps(_mm512_setzero_ps(), ones, (__m512bh)in[i]));
        float a = 0.f, b = 0.f;
        for (int l = 0; l < 8; ++l) a += s[l], b += s[8 + l];
        xs[t * lds + c / 16 + 2 * i] = a;
        xs[t * lds + c / 16 + 2 * i + 1] = b;
      }
    }
}

template <class W, int NT, int PF>
inline void word2_row(const uint8_t* q, int64_t nb, __m512i tab, const __m512i (&si)[4], const uint16_t* xp,
                      int64_t ldp, const float* xs, int64_t lds, float* Y, int64_t ldy) {
  __m512 a0[NT], a1[NT], mins[NT];
  FT_UNROLL for (int t = 0; t < NT; ++t) a0[t] = a1[t] = mins[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = q + W::kBytes * b;
    if (PF) FT_UNROLL for (int i = 0; i < W::kBytes + 63; i += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + PF + i, _MM_HINT_T0);
    __m512 sm, nm = _mm512_setzero_ps();
    W::scales(blk, sm, nm);
    __m512bh w[8];
    W::weights(blk, tab, w);
    __m512 s[4];
    FT_UNROLL for (int k = 0; k < 4; ++k) s[k] = _mm512_permutexvar_ps(si[k], sm);
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      const uint16_t* x = xp + t * ldp + kQK * b;
      FT_UNROLL for (int k = 0; k < 4; ++k) {
        const __m512 d = _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), w[k], (__m512bh)_mm512_loadu_si512(x + 32 * k)),
                                          w[k + 4], (__m512bh)_mm512_loadu_si512(x + 32 * (k + 4)));
        if (k & 1)
          a1[t] = _mm512_fmadd_ps(d, s[k], a1[t]);
        else
          a0[t] = _mm512_fmadd_ps(d, s[k], a0[t]);
      }
      if (W::kMins) mins[t] = _mm512_fmadd_ps(nm, _mm512_loadu_ps(xs + t * lds + 16 * b), mins[t]);
    }
  }
  FT_UNROLL for (int t = 0; t < NT; ++t) {
    __m512 v = _mm512_add_ps(a0[t], a1[t]);
    if (W::kMins) v = _mm512_add_ps(v, mins[t]);
    Y[t * ldy] = _mm512_reduce_add_ps(v);
  }
}

template <class W, int NT>
inline void word2_block(const WeightMat& m, int64_t r0, int64_t r1, __m512i tab, const __m512i (&si)[4],
                        const uint16_t* xp, int64_t ldp, const float* xs, int64_t lds, float* Y, int64_t ldy) {
  constexpr int PF = NT == 1 ? avx512_nib::kAhead : 0;
  const int64_t nb = m.cols / kQK;
  for (int64_t r = r0; r < r1; ++r)
    word2_row<W, NT, PF>(m.q + r * m.q_stride, nb, tab, si, xp, ldp, xs, lds, Y + (r - r0), ldy);
}

template <class W>
inline void word2_rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                       float* Y, int64_t ldy) {
  const int64_t ldp = m.cols + 32, lds = m.cols / 16;  // + 32: no 4 KiB aliasing between the tokens' rows
  thread_local FloatBuf xbuf, sbuf;
  uint16_t* xp = u16_buf(xbuf, kTokBlock * ldp);
  float* xs = W::kMins ? sbuf.get(kTokBlock * lds) : nullptr;
  const __m512i tab = W::table();
  __m512i si[4];
  for (int k = 0; k < 4; ++k) {
    alignas(64) int32_t v[16];
    for (int i = 0; i < 16; ++i) v[i] = k2_scale_of(k, i);
    si[k] = _mm512_load_si512(v);
  }
  for (int64_t t0 = 0; t0 < ntok; t0 += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, ntok - t0));
    prep2(X + t0 * ldx, ldx, nt, m.cols, xp, ldp, xs, lds);
    float* Yt = Y + t0 * ldy;
    switch (nt) {
      case 4: word2_block<W, 4>(m, r0, r1, tab, si, xp, ldp, xs, lds, Yt, ldy); break;
      case 3: word2_block<W, 3>(m, r0, r1, tab, si, xp, ldp, xs, lds, Yt, ldy); break;
      case 2: word2_block<W, 2>(m, r0, r1, tab, si, xp, ldp, xs, lds, Yt, ldy); break;
      default: word2_block<W, 1>(m, r0, r1, tab, si, xp, ldp, xs, lds, Yt, ldy); break;
    }
  }
}

// Decoders of the prefill kernel: codes in column order. Column 128n + 32j + l: field j of byte 32n + l of the
// codes; Q3_K's high bit, bit 4n + j of hmask byte l, put at bit 2 of the index by one ternary-logic op.
struct Q3KT {
  static constexpr int kCols = kQK, kSub = 16;
  static constexpr bool kMins = false;
  static constexpr int kMin16 = 9, kMin8 = 7;
  static void decode(const WeightMat& m, int64_t row, int64_t blk, uint16_t* codes, float* sm) {
    const uint8_t* b = m.q + row * m.q_stride + blk * Q3KW2::kBytes;
    _mm512_storeu_ps(sm, q3k_scale_vec(b));
    const __m512i tab = Q3KW2::table(), two = _mm512_set1_epi16(0x0003);
    const __m512i hm = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
    FT_UNROLL for (int n = 0; n < 2; ++n) {
      const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 + 32 * n)));
      FT_UNROLL for (int j = 0; j < 4; ++j) {
        const int s = 4 * n + j - 2;
        const __m512i hb = s >= 0 ? _mm512_srli_epi16(hm, s) : _mm512_slli_epi16(hm, -s);
        const __m512i idx = _mm512_ternarylogic_epi32(j ? _mm512_srli_epi16(v, 2 * j) : v, hb, two, 0xe4);
        _mm512_storeu_si512(codes + 128 * n + 32 * j, _mm512_permutexvar_epi16(idx, tab));
      }
    }
  }
};

// Q2_K: half blocks of 128 columns (8 scales and 8 mins fit sm's 16).
struct Q2KT {
  static constexpr int kCols = 128, kSub = 16;
  static constexpr bool kMins = true;
  static constexpr int kMin16 = 9, kMin8 = 7;
  static void decode(const WeightMat& m, int64_t row, int64_t half, uint16_t* codes, float* sm) {
    const uint8_t* b = m.q + row * m.q_stride + (half >> 1) * Q2KW2::kBytes;
    const int n = static_cast<int>(half & 1);
    __m512 sc, nm;
    q2k_scale_vecs(b, sc, nm);
    alignas(64) float s[16], z[16];
    _mm512_store_ps(s, sc);
    _mm512_store_ps(z, nm);
    for (int i = 0; i < 8; ++i) sm[i] = s[8 * n + i], sm[8 + i] = z[8 * n + i];
    const __m512i tab = Q2KW2::table();
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * n)));
    FT_UNROLL for (int j = 0; j < 4; ++j)
      _mm512_storeu_si512(codes + 32 * j, _mm512_permutexvar_epi16(j ? _mm512_srli_epi16(v, 2 * j) : v, tab));
  }
};

template <class T, class W>
inline void bf16_rows2(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                       float* Y, int64_t ldy) {
  avx512bf16_tokgemm::then_rows<T>(m, r0, r1, X, ntok, ldx, Y, ldy, [&](const uint16_t* Xr, int64_t nr, float* Yr) {
    word2_rows<W>(m, r0, r1, Xr, nr, ldx, Yr, ldy);
  });
}

}  // namespace

void rows_bf16act_q4k_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                 int64_t ldx, float* Y, int64_t ldy) {
  bf16_rows<QnKT<false>, QnKW<false>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_bf16act_q5k_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                 int64_t ldx, float* Y, int64_t ldy) {
  bf16_rows<QnKT<true>, QnKW<true>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_bf16act_q6k_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                 int64_t ldx, float* Y, int64_t ldy) {
  bf16_rows<Q6KT, Q6KW>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_bf16act_q3k_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                 int64_t ldx, float* Y, int64_t ldy) {
  bf16_rows2<Q3KT, Q3KW2>(m, r0, r1, X, ntok, ldx, Y, ldy);
}
void rows_bf16act_q2k_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                 int64_t ldx, float* Y, int64_t ldy) {
  bf16_rows2<Q2KT, Q2KW2>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
