// AVX-512 BF16, GGUF K-quant formats (Q4_K, Q5_K, Q6_K) over bf16 activations (cpu/bf16act.h).
//
// Per super-block and row the scales (and negated mins) are decoded once (kquant_rows.h's rules); per 32
// columns the codes are cut from the block's bytes in registers (nibbles, Q5_K's fifth bit, Q6_K's 2-bit
// high parts: byte shifts and masks, no code buffer), zero-extended to words, looked up in a 64-entry
// bf16 table by `vpermi2w` (entry k: k - kOff, Q6_K's codes being stored + 32), and meet x in one
// `vdpbf16ps`: lane i sums columns 2i and 2i + 1 exactly
// (every code and every bf16 x product is exact in fp32). The sub-block's scale multiplies the partial
// sums once (Q6_K: lanes 0-7 and 8-15 are two sub-blocks of 16); the mins come in as
// -(dmin m) * sum(x over the sub-block), the sums taken once per call. So the result differs from the
// fp32 kernel's on the same bf16 x only in fp32 rounding order.
#include <immintrin.h>

#include <cstring>

#include "cpu/arch/kquant_rows.h"

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

// Q4_K / Q5_K: the 8 sub-block scales d * sc to out[0..7] and negated mins -(dmin * m) to out[8..15], the
// values of kq_scales_mins (each one exact product) in one vector: the fields of kq_unpack6 widened and
// multiplied by (d x 8, -dmin x 8).
inline void scales_mins(const uint8_t* b, float* out) {
  uint32_t f[4];
  kq_unpack6(b + 4, f);
  const __m128i sm = _mm_set_epi32(f[3], f[2], f[1], f[0]);  // from registers: no store-forwarding stall
  const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm));
  const __m512 dd = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(F16c::f16(b)), _mm512_set1_ps(-F16c::f16(b + 2)));
  _mm512_store_ps(out, _mm512_mul_ps(v, dd));
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
struct Q4KR {
  static constexpr int kBytes = 144, kSub = 32, kOff = 0;
  static void scales(const uint8_t* b, float* out) { scales_mins(b, out); }
  static __m256i codes(const uint8_t* b, int c) {
    const __m256i v = ld32(b + 16 + 32 * (c / 64));  // columns 64j.. low nibbles, 64j + 32.. high
    return _mm256_and_si256((c & 32) ? _mm256_srli_epi16(v, 4) : v, mask8(0x0f));
  }
};
struct Q5KR {
  static constexpr int kBytes = 176, kSub = 32, kOff = 0;
  static void scales(const uint8_t* b, float* out) { scales_mins(b, out); }
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
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int64_t t = 0; t < ntok; t += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, ntok - t));
    const uint16_t* Xt = X + t * ldx;
    if (D::kSub == 32)  // sums of x over each 32 columns (exact products, fp32 sums)
      for (int j = 0; j < nt; ++j)
        for (int64_t g = 0; g < lds; ++g)
          xs[j * lds + g] = _mm512_reduce_add_ps(
              _mm512_dpbf16_ps(_mm512_setzero_ps(), ones, (__m512bh)_mm512_loadu_si512(Xt + j * ldx + 32 * g)));
    float* Yt = Y + t * ldy;
    switch (nt) {
      case 4: kqb_block<D, 4>(m, r0, r1, Xt, ldx, xs, lds, Yt, ldy, tlo, thi); break;
      case 3: kqb_block<D, 3>(m, r0, r1, Xt, ldx, xs, lds, Yt, ldy, tlo, thi); break;
      case 2: kqb_block<D, 2>(m, r0, r1, Xt, ldx, xs, lds, Yt, ldy, tlo, thi); break;
      default: kqb_block<D, 1>(m, r0, r1, Xt, ldx, xs, lds, Yt, ldy, tlo, thi); break;
    }
  }
}

}  // namespace

void rows_bf16act_q4k_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                 int64_t ldx, float* Y, int64_t ldy) {
  kqb_rows<Q4KR>(m, r0, r1, X, ntok, ldx, Y, ldy);
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
