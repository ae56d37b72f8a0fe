// Row kernels of GGUF's K-quant formats (Q4_K, Q5_K, Q6_K, Q3_K, Q2_K; layouts in cpu/formats.h), shared by the
// SIMD files: x86_avx2_kquant.cpp, x86_avx512_kquant.cpp, arm_neon_kquant.cpp.
//
// Per super-block of 256 columns and row, a decoder D unpacks the block once into int8 codes q[256] and
// one (scale, -min) pair per sub-block (32 columns; Q6_K, Q3_K, Q2_K 16), in plain loops the compiler vectorises with the including
// file's ISA flags. The dot loop then turns each L codes into fp32 weights with one FMA,
// w = q * scale + (-min) (exact: see kquant_at in scalar.cpp, so w is bit for bit the scalar
// definition), and multiplies them into the NT tokens of the tile. The decode is paid once per row and
// block and shared by the tile's tokens.
//
// ISA traits I as in rows_common.h, plus a converter P: P::i8(const int8_t*) -> V of L int8 codes as fp32;
// P::f16(const uint8_t*) -> the little-endian f16 there as fp32.
#pragma once
#include "cpu/arch/rows_common.h"

namespace ft {
namespace {

// The 6-bit (scale, min) fields of a Q4_K / Q5_K block's 12 scale bytes ``s`` as four words of four bytes:
// scales of sub-blocks 0..3, scales 4..7, mins 0..3, mins 4..7 (kquant_scale_min's packing, read as 32-bit
// words with no branch per sub-block: the 2 high bits of sub-blocks 4..7 sit in bits 6-7 of bytes 0..7).
inline void kq_unpack6(const uint8_t* s, uint32_t out[4]) {
  uint32_t w[3];
  std::memcpy(w, s, 12);
  const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, hi2 = 0x30303030u;
  out[0] = w[0] & lo6;
  out[1] = (w[2] & lo4) | ((w[0] >> 2) & hi2);
  out[2] = w[1] & lo6;
  out[3] = ((w[2] >> 4) & lo4) | ((w[1] >> 2) & hi2);
}

// One Q4_K / Q5_K block's 8 sub-block scales d * sc and negated mins -(dmin * m).
template <class P>
inline void kq_scales_mins(const uint8_t* b, float* sc, float* nm) {
  uint32_t f[4];
  kq_unpack6(b + 4, f);
  uint8_t v[16];  // scales 0..7, mins 0..7
  std::memcpy(v, f, 16);
  const float d = P::f16(b), dmin = P::f16(b + 2);
  for (int j = 0; j < 8; ++j) {
    sc[j] = d * static_cast<float>(v[j]);
    nm[j] = -(dmin * static_cast<float>(v[8 + j]));
  }
}

// Decoders: kSub columns share a scale; decode(b, q, sc, nm) fills q[256] and kQK / kSub scales and negated mins.
struct Q4K {
  static constexpr int kBytes = 144, kSub = 32;
  template <class P>
  static void decode(const uint8_t* b, int8_t* q, float* sc, float* nm) {
    kq_scales_mins<P>(b, sc, nm);
    const uint8_t* qs = b + 16;
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        q[64 * j + l] = static_cast<int8_t>(qs[32 * j + l] & 0xf);
        q[64 * j + 32 + l] = static_cast<int8_t>(qs[32 * j + l] >> 4);
      }
  }
};

struct Q5K {
  static constexpr int kBytes = 176, kSub = 32;
  template <class P>
  static void decode(const uint8_t* b, int8_t* q, float* sc, float* nm) {
    kq_scales_mins<P>(b, sc, nm);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        q[64 * j + l] = static_cast<int8_t>((qs[32 * j + l] & 0xf) | (((qh[l] >> (2 * j)) & 1) << 4));
        q[64 * j + 32 + l] = static_cast<int8_t>((qs[32 * j + l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4));
      }
  }
};

struct Q6K {
  static constexpr int kBytes = 210, kSub = 16;
  template <class P>
  static void decode(const uint8_t* b, int8_t* q, float* sc, float* nm) {
    const float d = P::f16(b + 208);
    for (int i = 0; i < 16; ++i) {
      sc[i] = d * static_cast<float>(static_cast<int8_t>(b[192 + i]));
      nm[i] = 0.f;
    }
    for (int n = 0; n < 2; ++n) {
      const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
      int8_t* o = q + 128 * n;
      for (int l = 0; l < 32; ++l) {
        o[l] = static_cast<int8_t>(((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32);
        o[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
        o[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        o[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
  }
};

// Q3_K: per half n and 2-bit field j, bytes 32 + 32n + l hold column 128n + 32j + l at bits 2j, its high bit is
// bit 4n + j of byte l (set: q = low, clear: low - 4); scale of sub-block k: q3k_scale - 32, times d.
struct Q3K {
  static constexpr int kBytes = 110, kSub = 16;
  template <class P>
  static void decode(const uint8_t* b, int8_t* q, float* sc, float* nm) {
    const float d = P::f16(b + 108);
    for (int k = 0; k < 16; ++k) {
      sc[k] = d * static_cast<float>(q3k_scale(b + 96, k) - 32);
      nm[k] = 0.f;
    }
    for (int n = 0; n < 2; ++n)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l)
          q[128 * n + 32 * j + l] = static_cast<int8_t>(((b[32 + 32 * n + l] >> (2 * j)) & 3) +
                                                        4 * ((b[l] >> (4 * n + j)) & 1) - 4);
  }
};

// Q2_K: codes as Q3_K's low bits (from byte 16); byte k < 16: scale (low nibble) and min (high) of sub-block k.
struct Q2K {
  static constexpr int kBytes = 84, kSub = 16;
  template <class P>
  static void decode(const uint8_t* b, int8_t* q, float* sc, float* nm) {
    const float d = P::f16(b + 80), dmin = P::f16(b + 82);
    for (int k = 0; k < 16; ++k) {
      sc[k] = d * static_cast<float>(b[k] & 0xf);
      nm[k] = -(dmin * static_cast<float>(b[k] >> 4));
    }
    for (int n = 0; n < 2; ++n)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) q[128 * n + 32 * j + l] = static_cast<int8_t>((b[16 + 32 * n + l] >> (2 * j)) & 3);
  }
};

// NR rows (starting at q, stride qs bytes) x NT tokens, nb blocks. Y[t * ldy + r] = row r . token t.
template <class I, class P, class D, int NR, int NT>
inline void kq_tile(const uint8_t* q, int64_t qs, int64_t nb, const float* X, int64_t ldx, float* Y, int64_t ldy) {
  using V = typename I::V;
  constexpr int L = I::L, U = NR * NT >= 6 ? 1 : 2;  // U accumulators per (row, token): enough FMA chains
  alignas(64) int8_t code[NR][kQK];
  alignas(64) float sc[NR][16], nm[NR][16];
  V acc[U][NR][NT];
  FT_UNROLL for (int u = 0; u < U; ++u)
    FT_UNROLL for (int r = 0; r < NR; ++r)
      FT_UNROLL for (int t = 0; t < NT; ++t) acc[u][r][t] = I::zero();
  for (int64_t b = 0; b < nb; ++b) {
    FT_UNROLL for (int r = 0; r < NR; ++r) D::template decode<P>(q + r * qs + b * D::kBytes, code[r], sc[r], nm[r]);
    const float* xb = X + b * kQK;
    for (int c = 0; c < kQK; c += U * L) {
      FT_UNROLL for (int u = 0; u < U; ++u) {
        const int cc = c + u * L, s = cc / D::kSub;
        V x[NT];
        FT_UNROLL for (int t = 0; t < NT; ++t) x[t] = I::loadx(xb + t * ldx + cc);
        FT_UNROLL for (int r = 0; r < NR; ++r) {
          const V w = I::fma(P::i8(code[r] + cc), I::bcast(sc[r][s]), I::bcast(nm[r][s]));
          FT_UNROLL for (int t = 0; t < NT; ++t) acc[u][r][t] = I::fma(w, x[t], acc[u][r][t]);
        }
      }
    }
  }
  FT_UNROLL for (int r = 0; r < NR; ++r)
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      V v = acc[0][r][t];
      FT_UNROLL for (int u = 1; u < U; ++u) v = I::add(v, acc[u][r][t]);
      Y[t * ldy + r] = I::hsum(v);
    }
}

template <class I, class P, class D, int NT>
inline void kq_block(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ldx, float* Y, int64_t ldy) {
  constexpr int NR = I::kGroupNR[NT];
  const int64_t nb = m.cols / kQK, qs = m.q_stride;
  int64_t r = r0;
  for (; r + NR <= r1; r += NR) kq_tile<I, P, D, NR, NT>(m.q + r * qs, qs, nb, X, ldx, Y + (r - r0), ldy);
  for (; r < r1; ++r) kq_tile<I, P, D, 1, NT>(m.q + r * qs, qs, nb, X, ldx, Y + (r - r0), ldy);
}

// The RowsFn of a K-quant format (check_mat has made sure cols % 256 == 0).
template <class I, class P, class D>
inline void kq_rows(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                    int64_t ldy) {
  for (int64_t t = 0; t < ntok; t += kTokBlock) {
    const float* Xt = X + t * ldx;
    float* Yt = Y + t * ldy;
    switch (std::min<int64_t>(kTokBlock, ntok - t)) {
      case 4: kq_block<I, P, D, 4>(m, r0, r1, Xt, ldx, Yt, ldy); break;
      case 3: kq_block<I, P, D, 3>(m, r0, r1, Xt, ldx, Yt, ldy); break;
      case 2: kq_block<I, P, D, 2>(m, r0, r1, Xt, ldx, Yt, ldy); break;
      default: kq_block<I, P, D, 1>(m, r0, r1, Xt, ldx, Yt, ldy); break;
    }
  }
}

}  // namespace
}  // namespace ft
