// Row-kernel skeletons shared by the SIMD files (x86_avx2_*, x86_avx512_*, arm_neon_*): the loops, the
// token/row blocking and the per-group scale folding live here once; each ISA file supplies a traits
// struct `I` (vector type and a few ops) and each format file a decoder `D`.
//
// Everything is in an anonymous namespace: every translation unit gets its own copies, compiled with
// that file's ISA flags, so no AVX-512 code can leak into another file's symbols.
//
// ISA traits I:   using V; static constexpr int L (fp32 lanes of V); zero(); loadx(const float*) (unaligned);
//                 fma(a, b, c) = a * b + c; add(a, b); mul(a, b); bcast(float); hsum(V) -> float; store(float*, V);
//                 deint(a, b): the 2L floats a, b (columns c..c+2L-1) as their even columns in a, odd ones in b;
//                 kDenseNR[NT], kGroupNR[NT] (rows per tile for NT = 1..4 tokens per tile).
// Dense decoder:  load(const uint8_t* row, int64_t c) -> V of columns c..c+L-1; scalar(row, c) -> float.
// Group decoder:  kScaleMul (constant folded into every group scale), kZero (subtract zero * sum(x) per group),
//                 kPrep (activations scaled by kXLo / kXHi and, if kPerm, reordered by prep_x),
//                 vec_ok(m), decode(row, c, w0, w1): columns c..c+2L-1 of one chunk (in Xv's order),
//                 zero(m, r, g) -> float.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "cpu/formats.h"

namespace ft {
namespace {

// Loops over tile dimensions are unrolled early so the tiles' vector arrays live in registers.
#define FT_UNROLL _Pragma("GCC unroll 16")

// A grow-only float buffer of internal linkage. (Not std::vector: its out-of-line members are weak symbols
// shared by every translation unit, so the linker could pick a copy compiled with -mavx512f for all files.)
// 64-byte aligned: the kernels' x rows start on a cache line (their strides are whole lines), so a 64-byte x load
// is one line, not two. malloc's 16-byte alignment split 3 of 4 such loads in a process by chance: one Zen 5 core,
// [32768, 2048] BF16 from DRAM, 4 tokens, one row a stream: 15-17 GB/s in processes whose buffer was not on a
// line, 32-33 in those whose was.
struct FloatBuf {
  float* p = nullptr;
  int64_t n = 0;
  float* get(int64_t k) {
    if (k > n) {
      std::free(p);
      p = static_cast<float*>(std::aligned_alloc(64, (sizeof(float) * std::max<int64_t>(k, 1) + 63) / 64 * 64));
      n = p ? k : 0;
      if (!p) throw std::bad_alloc();
    }
    return p;
  }
  ~FloatBuf() { std::free(p); }
};

// A thread's grow-only buffer of n bf16 values (FloatBuf storage).
inline uint16_t* u16_buf(FloatBuf& b, int64_t n) { return reinterpret_cast<uint16_t*>(b.get((n + 1) / 2)); }

// ---------------------------------------------------------------------------------------------------
// Dense formats (BF16, F16): Y[t, r] = sum_c decode(W[r, c]) * X[t, c]; NR rows x NT tokens per tile.
template <class I, class D, int NR, int NT, int PF = 0>  // PF: as pair_tile
inline void dense_tile(const uint8_t* q, int64_t qs, int64_t cols, const float* X, int64_t ldx, float* Y,
                       int64_t ldy) {
  using V = typename I::V;
  constexpr int L = I::L, U = NR * NT >= 6 ? 1 : NR * NT >= 3 ? 2 : 4;  // U column steps in flight: >= 4 FMA chains
  V acc[U][NR][NT];
  FT_UNROLL for (int u = 0; u < U; ++u)
    FT_UNROLL for (int r = 0; r < NR; ++r)
      FT_UNROLL for (int t = 0; t < NT; ++t) acc[u][r][t] = I::zero();
  int64_t c = 0;
  for (; c + U * L <= cols; c += U * L) {
    if (PF)  // NR == 1 when PF is set: the step's lines PF ahead
      FT_UNROLL for (int k = 0; k < 2 * U * L; k += 64) __builtin_prefetch(q + 2 * c + k + PF);
    FT_UNROLL for (int u = 0; u < U; ++u) {
      V w[NR];
      FT_UNROLL for (int r = 0; r < NR; ++r) w[r] = D::load(q + r * qs, c + u * L);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        V x = I::loadx(X + t * ldx + c + u * L);
        FT_UNROLL for (int r = 0; r < NR; ++r) acc[u][r][t] = I::fma(w[r], x, acc[u][r][t]);
      }
    }
  }
  for (; c + L <= cols; c += L) {
    FT_UNROLL for (int r = 0; r < NR; ++r) {
      V w = D::load(q + r * qs, c);
      FT_UNROLL for (int t = 0; t < NT; ++t) acc[0][r][t] = I::fma(w, I::loadx(X + t * ldx + c), acc[0][r][t]);
    }
  }
  float tail[NR][NT] = {};
  for (; c < cols; ++c)
    FT_UNROLL for (int r = 0; r < NR; ++r) {
      float wf = D::scalar(q + r * qs, c);
      FT_UNROLL for (int t = 0; t < NT; ++t) tail[r][t] += wf * X[t * ldx + c];
    }
  FT_UNROLL for (int r = 0; r < NR; ++r)
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      V v = acc[0][r][t];
      FT_UNROLL for (int u = 1; u < U; ++u) v = I::add(v, acc[u][r][t]);
      Y[t * ldy + r] = I::hsum(v) + tail[r][t];
    }
}

// Calls of up to kStreamTokens tokens stream their rows (pair_block, dense_block) in every token tile: the first tile
// reads each row once from DRAM, one at a time with the 8 KiB prefetch; a second finds the rows in cache (linear's
// ~64 KiB blocks from 5 tokens). 4-row tiles without a prefetch did both from 5 to 8 tokens: one Zen 5 core, [65536,
// 2048] from DRAM, 5 / 8 tokens, GB/s: AVX2 BF16 8.4 / 6.2 -> 15.6 / 10.6, AVX2 F16 9.5 / 7.5 -> 16.3 / 11.5, AVX-512
// BF16 (no BF16 dot product) 15.3 / 13.7 -> 16.5 / 15.7, F16 on AVX-512 BF16 15.4 / 13.6 -> 20.2 / 15.6; [16384,
// 7168] AVX2 BF16 7.5 / 5.8 -> 10.1 / 7.2. (12 tokens: 5.0 either way.)
constexpr int kStreamTokens = 2 * kTokBlock;

// `stream`: the call has at most kStreamTokens tokens (decode), so each weight is read once from DRAM (see pair_block).
template <class I, class D, int NT>
inline void dense_block(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ldx, float* Y,
                        int64_t ldy, bool stream) {
  constexpr int NR = I::kDenseNR[NT];
  if (NT == 1 || stream) {  // one row at a time on one stream prefetched 8 KiB ahead (see pair_block)
    for (int64_t r = r0; r < r1; ++r)
      dense_tile<I, D, 1, NT, 8192>(m.q + r * m.q_stride, m.q_stride, m.cols, X, ldx, Y + (r - r0), ldy);
    return;
  }
  int64_t r = r0;
  for (; r + NR <= r1; r += NR) dense_tile<I, D, NR, NT>(m.q + r * m.q_stride, m.q_stride, m.cols, X, ldx, Y + (r - r0), ldy);
  for (; r < r1; ++r) dense_tile<I, D, 1, NT>(m.q + r * m.q_stride, m.q_stride, m.cols, X, ldx, Y + (r - r0), ldy);
}

// Paired dense decoders (D::kPair): decode(row, c, w0, w1) yields the 2L columns c.. in even / odd order
// (lane i of w0 = column c + 2i, of w1 = column c + 2i + 1), x permuted to match once per call (perm_x).
// Columns past the last whole chunk (cv..cols) use the scalar decoder on the original x.
// PF > 0: software prefetch PF bytes ahead on each row stream (a template parameter: a run-time branch in
// this loop cost ~10 %).
template <class I, class D, int NR, int NT, int PF = 0, int U = 1>
inline void pair_tile(const uint8_t* q, int64_t qs, int64_t cv, int64_t cols, const float* Xp, int64_t ldp,
                      const float* X, int64_t ldx, float* Y, int64_t ldy) {
  using V = typename I::V;
  constexpr int L = I::L, C = 2 * L;
  V acc0[U][NR][NT], acc1[U][NR][NT];  // 2U independent FMA chains per (row, token)
  FT_UNROLL for (int u = 0; u < U; ++u)
    FT_UNROLL for (int r = 0; r < NR; ++r)
      FT_UNROLL for (int t = 0; t < NT; ++t) acc0[u][r][t] = acc1[u][r][t] = I::zero();
  int64_t c = 0;
  auto chunk = [&](int u, int64_t c) {
    V x0[NT], x1[NT];
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      x0[t] = I::loadx(Xp + t * ldp + c);
      x1[t] = I::loadx(Xp + t * ldp + c + L);
    }
    FT_UNROLL for (int r = 0; r < NR; ++r) {
      V w0, w1;
      if (PF && u == 0) __builtin_prefetch(q + r * qs + 2 * c + PF);  // one a 64-byte line when U = 2
      D::decode(q + r * qs, c, w0, w1);
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        acc0[u][r][t] = I::fma(w0, x0[t], acc0[u][r][t]);
        acc1[u][r][t] = I::fma(w1, x1[t], acc1[u][r][t]);
      }
    }
  };
  for (; c + U * C <= cv; c += U * C) FT_UNROLL for (int u = 0; u < U; ++u) chunk(u, c + u * C);
  for (; c < cv; c += C) chunk(0, c);
  FT_UNROLL for (int r = 0; r < NR; ++r)
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      float tail = 0.f;
      for (int64_t c = cv; c < cols; ++c) tail += D::scalar(q + r * qs, c) * X[t * ldx + c];
      V v = I::add(acc0[0][r][t], acc1[0][r][t]);
      FT_UNROLL for (int u = 1; u < U; ++u) v = I::add(v, I::add(acc0[u][r][t], acc1[u][r][t]));
      Y[t * ldy + r] = I::hsum(v) + tail;
    }
}

// x rows in the paired decoders' order: per chunk of C = 2L columns, the even columns then the odd ones.
template <class I>
inline void perm_x(const float* x, float* d, int64_t cv) {
  constexpr int L = I::L;
  for (int64_t c = 0; c < cv; c += 2 * L) {
    typename I::V a = I::loadx(x + c), b = I::loadx(x + c + L);
    I::deint(a, b);
    I::store(d + c, a);
    I::store(d + c + L, b);
  }
}

// `stream`: the call has at most kStreamTokens tokens (decode: each weight is read once from DRAM, see dense_block).
template <class I, class D, int NT>
inline void pair_block(const WeightMat& m, int64_t r0, int64_t r1, int64_t cv, const float* Xp, int64_t ldp,
                       const float* X, int64_t ldx, float* Y, int64_t ldy, bool stream) {
  constexpr int NR = I::kPairNR[NT];
  if (NT == 1 || stream) {
    // Streaming: one row at a time, software prefetch 8 KiB ahead on the one stream (one token: 4 FMA chains).
    // Several rows in flight made several short streams the prefetchers track badly; one Zen 5 core from DRAM,
    // one token, rows of 768 / 2048 / 7168 columns: 4 rows a tile 18 / 18 / 19 GB/s, one row with a 2 KiB prefetch
    // 30 / 30 / 22, one row with 8 KiB 33 / 35 / 31 (1 KiB: 27 / 27 / 21; 16 KiB: 33 / 34 / 28) of ~40. AVX2 BF16,
    // [32768, 2048], 2 / 4 tokens: tiles of 2 / 1 rows with no prefetch 11.6 / 8.0 GB/s, one row prefetched
    // 25.6-26.9 / 18.9-20.7.
    for (int64_t r = r0; r < r1; ++r) {
      if (NT == 1)
        pair_tile<I, D, 1, 1, 8192, 2>(m.q + r * m.q_stride, m.q_stride, cv, m.cols, Xp, ldp, X, ldx, Y + (r - r0), ldy);
      else
        pair_tile<I, D, 1, NT, 8192>(m.q + r * m.q_stride, m.q_stride, cv, m.cols, Xp, ldp, X, ldx, Y + (r - r0), ldy);
    }
    return;
  }
  int64_t r = r0;
  for (; r + NR <= r1; r += NR)
    pair_tile<I, D, NR, NT>(m.q + r * m.q_stride, m.q_stride, cv, m.cols, Xp, ldp, X, ldx, Y + (r - r0), ldy);
  for (; r < r1; ++r)
    pair_tile<I, D, 1, NT>(m.q + r * m.q_stride, m.q_stride, cv, m.cols, Xp, ldp, X, ldx, Y + (r - r0), ldy);
}

template <class I, class D>
inline void pair_rows(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                      int64_t ldy) {
  constexpr int L = I::L;
  const int64_t cv = m.cols / (2 * L) * (2 * L), ldp = cv + 16;  // pad: token rows do not alias one 4 KiB set
  thread_local FloatBuf xbuf;
  float* xp = xbuf.get(kTokBlock * ldp);
  const bool stream = ntok <= kStreamTokens;
  for (int64_t t = 0; t < ntok; t += kTokBlock) {
    const int nt = static_cast<int>(std::min<int64_t>(kTokBlock, ntok - t));
    for (int j = 0; j < nt; ++j) perm_x<I>(X + (t + j) * ldx, xp + j * ldp, cv);
    const float* Xt = X + t * ldx;
    float* Yt = Y + t * ldy;
    switch (nt) {
      case 4: pair_block<I, D, 4>(m, r0, r1, cv, xp, ldp, Xt, ldx, Yt, ldy, stream); break;
      case 3: pair_block<I, D, 3>(m, r0, r1, cv, xp, ldp, Xt, ldx, Yt, ldy, stream); break;
      case 2: pair_block<I, D, 2>(m, r0, r1, cv, xp, ldp, Xt, ldx, Yt, ldy, stream); break;
      default: pair_block<I, D, 1>(m, r0, r1, cv, xp, ldp, Xt, ldx, Yt, ldy, stream); break;
    }
  }
}

// Token blocks outside, rows inside: in prefill the (<= 64) rows stay in L1/L2 while x streams once.
template <class I, class D>
inline void dense_rows(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                       int64_t ldy) {
  const bool stream = ntok <= kStreamTokens;
  for (int64_t t = 0; t < ntok; t += kTokBlock) {
    const float* Xt = X + t * ldx;
    float* Yt = Y + t * ldy;
    switch (std::min<int64_t>(kTokBlock, ntok - t)) {
      case 4: dense_block<I, D, 4>(m, r0, r1, Xt, ldx, Yt, ldy, stream); break;
      case 3: dense_block<I, D, 3>(m, r0, r1, Xt, ldx, Yt, ldy, stream); break;
      case 2: dense_block<I, D, 2>(m, r0, r1, Xt, ldx, Yt, ldy, stream); break;
      default: dense_block<I, D, 1>(m, r0, r1, Xt, ldx, Yt, ldy, stream); break;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Group-scaled formats (FP8, INT4). Per group g of columns [g0, g1): the chunks of 2L columns inside it
// are accumulated unscaled in vector partials, then folded once: tot += (scale * kScaleMul) * partial;
// zero points as - scale * zero * sum(x over the vector part of g). Columns of a group that do not fill
// a whole chunk (partial last group, group not a multiple of 2L) use weight_at, the scalar definition.
struct GroupAct {
  const float* Xv;  // activations in the decoder's lane order (X itself when !kPrep)
  int64_t ldxv;
  const float* Sx;  // [ntok, n_groups] sums of x over each group's vector part (kZero only)
  int64_t lds;
};

inline int64_t vec_end(int64_t g0, int64_t g1, int64_t chunk, bool ok) { return ok ? g0 + (g1 - g0) / chunk * chunk : g0; }

template <class I, class D, int NR, int NT>
inline void group_tile(const WeightMat& m, int64_t r, const GroupAct& a, const float* X, int64_t ldx, float* Y,
                       int64_t ldy) {
  using V = typename I::V;
  constexpr int L = I::L, C = 2 * L;
  const int64_t cols = m.cols, G = m.group, ng = (cols + G - 1) / G, qs = m.q_stride, ss = m.scale_stride;
  const bool ok = D::vec_ok(m);
  const uint8_t* q = m.q + r * qs;
  const float* s = static_cast<const float*>(m.scale) + r * ss;
  V tot[NR][NT];
  float sc[NR][NT] = {};  // zero-point corrections and scalar columns
  FT_UNROLL for (int i = 0; i < NR; ++i)
    FT_UNROLL for (int t = 0; t < NT; ++t) tot[i][t] = I::zero();
  for (int64_t g = 0; g < ng; ++g) {
    const int64_t g0 = g * G, g1 = std::min(cols, g0 + G), gv = vec_end(g0, g1, C, ok);
    if (gv > g0) {
      V p0[NR][NT], p1[NR][NT];  // two independent FMA chains per (row, token)
      FT_UNROLL for (int i = 0; i < NR; ++i)
        FT_UNROLL for (int t = 0; t < NT; ++t) p0[i][t] = p1[i][t] = I::zero();
      for (int64_t c = g0; c < gv; c += C) {
        if (NR == 1) {  // one row, several tokens: decode first, then stream the tokens' x
          V w0, w1;
          __builtin_prefetch(q + qs + D::byte_of(c));  // short rows defeat the hardware prefetcher: fetch
                                                       // the next tile's row, same column
          D::decode(q, c, w0, w1);
          FT_UNROLL for (int t = 0; t < NT; ++t) {
            const float* xv = a.Xv + t * a.ldxv + c;
            p0[0][t] = I::fma(w0, I::loadx(xv), p0[0][t]);
            p1[0][t] = I::fma(w1, I::loadx(xv + L), p1[0][t]);
          }
        } else {  // several rows: load x once, decode row by row
          {
            const int64_t step = c / C, slice = (NR * qs * C + cols - 1) / cols;
            for (int64_t k = 0; k < slice; k += 64) __builtin_prefetch(q + NR * qs + step * slice + k);
          }
          V x0[NT], x1[NT];
          FT_UNROLL for (int t = 0; t < NT; ++t) {
            x0[t] = I::loadx(a.Xv + t * a.ldxv + c);
            x1[t] = I::loadx(a.Xv + t * a.ldxv + c + L);
          }
          FT_UNROLL for (int i = 0; i < NR; ++i) {
            V w0, w1;
            D::decode(q + i * qs, c, w0, w1);
            FT_UNROLL for (int t = 0; t < NT; ++t) {
              p0[i][t] = I::fma(w0, x0[t], p0[i][t]);
              p1[i][t] = I::fma(w1, x1[t], p1[i][t]);
            }
          }
        }
      }
      FT_UNROLL for (int i = 0; i < NR; ++i) {
        const float sv = s[i * ss + g];
        const typename I::V sb = I::bcast(sv * D::kScaleMul);
        FT_UNROLL for (int t = 0; t < NT; ++t) tot[i][t] = I::fma(sb, I::add(p0[i][t], p1[i][t]), tot[i][t]);
        if (D::kZero) {
          const float zs = D::zero(m, r + i, g) * sv;
          FT_UNROLL for (int t = 0; t < NT; ++t) sc[i][t] -= zs * a.Sx[t * a.lds + g];
        }
      }
    }
    for (int64_t c = gv; c < g1; ++c)
      FT_UNROLL for (int i = 0; i < NR; ++i) {
        const float w = weight_at(m, r + i, c);
        FT_UNROLL for (int t = 0; t < NT; ++t) sc[i][t] += w * X[t * ldx + c];
      }
  }
  FT_UNROLL for (int i = 0; i < NR; ++i)
    FT_UNROLL for (int t = 0; t < NT; ++t) Y[t * ldy + i] = I::hsum(tot[i][t]) + sc[i][t];
}

template <class I, class D, int NT>
inline void group_block(const WeightMat& m, int64_t r0, int64_t r1, const GroupAct& a, const float* X, int64_t ldx,
                        float* Y, int64_t ldy) {
  constexpr int NR = I::kGroupNR[NT];
  int64_t r = r0;
  for (; r + NR <= r1; r += NR) group_tile<I, D, NR, NT>(m, r, a, X, ldx, Y + (r - r0), ldy);
  for (; r < r1; ++r) group_tile<I, D, 1, NT>(m, r, a, X, ldx, Y + (r - r0), ldy);
}

// Activations for decoders with kPrep: every column times D::kXLo (even columns) / D::kXHi (odd columns) and,
// when D::kPerm, reordered inside each group's chunks of 2L columns (c0 even) so that lane i of the first vector
// is column c0 + 2i and lane i of the second column c0 + 2i + 1 (int4: low / high nibbles of byte i). Also the
// sums of x over each group's vector part, for the zero points.
template <class I, class D>
inline void prep_x(const WeightMat& m, const float* X, int64_t ntok, int64_t ldx, float* xv, float* sx) {
  using V = typename I::V;
  constexpr int L = I::L, C = 2 * L;
  const int64_t cols = m.cols, G = m.group, ng = (cols + G - 1) / G;
  const bool ok = D::vec_ok(m);
  const V lo = I::bcast(D::kXLo), hi = I::bcast(D::kXHi);
  for (int64_t t = 0; t < ntok; ++t) {
    const float* x = X + t * ldx;
    float* d = xv + t * cols;
    for (int64_t g = 0; g < ng; ++g) {
      const int64_t g0 = g * G, g1 = std::min(cols, g0 + G), gv = vec_end(g0, g1, C, ok);
      V sum = I::zero();
      for (int64_t c = g0; c < gv; c += C) {
        V a = I::loadx(x + c), b = I::loadx(x + c + L);
        if (D::kZero) sum = I::add(sum, I::add(a, b));
        if constexpr (D::kPerm) {
          I::deint(a, b);
          I::store(d + c, I::mul(a, lo));
          I::store(d + c + L, I::mul(b, hi));
        } else {
          static_assert(D::kXLo == D::kXHi, "unpermuted x takes one factor");
          I::store(d + c, I::mul(a, lo));
          I::store(d + c + L, I::mul(b, lo));
        }
      }
      sx[t * ng + g] = D::kZero ? I::hsum(sum) : 0.f;
    }
  }
}

template <class I, class D>
inline void group_rows(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                       int64_t ldy) {
  thread_local FloatBuf xv, sx;
  const int64_t ng = (m.cols + m.group - 1) / m.group;
  GroupAct a{X, ldx, nullptr, 0};
  if (D::kPrep) {
    float *pxv = xv.get(ntok * m.cols), *psx = sx.get(ntok * ng);
    prep_x<I, D>(m, X, ntok, ldx, pxv, psx);
    a = GroupAct{pxv, m.cols, psx, ng};
  }
  for (int64_t t = 0; t < ntok; t += kTokBlock) {
    GroupAct at{a.Xv + t * a.ldxv, a.ldxv, a.Sx ? a.Sx + t * a.lds : nullptr, a.lds};
    const float* Xt = X + t * ldx;
    float* Yt = Y + t * ldy;
    switch (std::min<int64_t>(kTokBlock, ntok - t)) {
      case 4: group_block<I, D, 4>(m, r0, r1, at, Xt, ldx, Yt, ldy); break;
      case 3: group_block<I, D, 3>(m, r0, r1, at, Xt, ldx, Yt, ldy); break;
      case 2: group_block<I, D, 2>(m, r0, r1, at, Xt, ldx, Yt, ldy); break;
      default: group_block<I, D, 1>(m, r0, r1, at, Xt, ldx, Yt, ldy); break;
    }
  }
}

// Shared decoder pieces (ISA-independent).
struct Int4Common {  // decoders add kXLo / kXHi (the factors that undo their nibble encodings)
  static constexpr float kScaleMul = 1.f;
  static constexpr bool kZero = true, kPrep = true, kPerm = true;
  static bool vec_ok(const WeightMat& m) { return m.group % 2 == 0; }  // chunks start on a byte
  static int64_t byte_of(int64_t c) { return c / 2; }
  static float zero(const WeightMat& m, int64_t r, int64_t g) {
    return m.fmt == Fmt::INT4_ASYM ? static_cast<float>(m.zero[r * m.scale_stride + g]) : 8.f;
  }
};
struct Fp8Common {
  static constexpr float kScaleMul = 256.f;  // e4m3 bits placed in f16 read 2^-8 of their value
  static constexpr bool kZero = false, kPrep = false, kPerm = false;
  static constexpr float kXLo = 1.f, kXHi = 1.f;
  static bool vec_ok(const WeightMat&) { return true; }
  static int64_t byte_of(int64_t c) { return c; }
  static float zero(const WeightMat&, int64_t, int64_t) { return 0.f; }
};

// ---------------------------------------------------------------------------------------------------
// 4-bit e2m1 formats (MXFP4, NVFP4): W[r, c] = e2m1(code) * stab[scale byte] * post. The ISA header
// supplies K::permute(x, xp, cols) (x reordered to the decode's column order) and
// K::tile<B, NT>(q, s, stab, c0, c1, xp, ldp, out, ldy) (adds columns [c0, c1) of NT tokens to out).
template <class K, int B>
inline void e2m1_rows(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                      int64_t ldy, const float* stab, float post) {
  constexpr int NT = kTokBlock;
  const int64_t cols = m.cols, ldp = cols + 16;  // pad: token rows of xp do not alias one 4 KiB set
  // Decode (few tokens per expert): one pass over each row, rows streamed in order. Prefill: x tiles
  // of NT x kt fp32 (16 KiB) stay in L1 while the task's rows (<= 256 KiB) are re-read from L2.
  const int64_t kt = ntok <= NT ? cols : 1024;
  thread_local FloatBuf xbuf;
  float* xp = xbuf.get(NT * ldp);
  for (int64_t t0 = 0; t0 < ntok; t0 += NT) {
    const int nt = static_cast<int>(std::min<int64_t>(NT, ntok - t0));
    for (int t = 0; t < nt; ++t) {
      K::permute(X + (t0 + t) * ldx, xp + t * ldp, cols);
      std::fill(Y + (t0 + t) * ldy, Y + (t0 + t) * ldy + (r1 - r0), 0.f);
    }
    for (int64_t k0 = 0; k0 < cols; k0 += kt) {
      const int64_t k1 = std::min(cols, k0 + kt);
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* q = m.q + r * m.q_stride;
        const uint8_t* s = static_cast<const uint8_t*>(m.scale) + r * m.scale_stride;
        float* out = Y + t0 * ldy + (r - r0);
        switch (nt) {
          case 4: K::template tile<B, 4>(q, s, stab, k0, k1, xp, ldp, out, ldy); break;
          case 3: K::template tile<B, 3>(q, s, stab, k0, k1, xp, ldp, out, ldy); break;
          case 2: K::template tile<B, 2>(q, s, stab, k0, k1, xp, ldp, out, ldy); break;
          default: K::template tile<B, 1>(q, s, stab, k0, k1, xp, ldp, out, ldy); break;
        }
      }
    }
    if (post != 1.f)
      for (int t = 0; t < nt; ++t)
        for (int64_t r = 0; r < r1 - r0; ++r) Y[(t0 + t) * ldy + r] *= post;
  }
}

// An ISA's e2m1 header defines permute_x(x, xp, cols) and dot_tile<B, NT>(...) (the pieces above)
// in its own namespace, then FT_E2M1_ROWS() there: Kern for e2m1_rows and the RowsFn rows<B>.
#define FT_E2M1_ROWS()                                                                               \
  struct Kern {                                                                                      \
    static void permute(const float* x, float* xp, int64_t cols) { permute_x(x, xp, cols); }         \
    template <int B, int NT>                                                                         \
    static void tile(const uint8_t* q, const uint8_t* s, const float* stab, int64_t c0, int64_t c1,  \
                     const float* xp, int64_t ldp, float* out, int64_t ldy) {                        \
      dot_tile<B, NT>(q, s, stab, c0, c1, xp, ldp, out, ldy);                                        \
    }                                                                                                \
  };                                                                                                 \
  template <int B>                                                                                   \
  static void rows(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok,         \
                   int64_t ldx, float* Y, int64_t ldy, const float* stab, float post) {              \
    e2m1_rows<Kern, B>(m, r0, r1, X, ntok, ldx, Y, ldy, stab, post);                                 \
  }

}  // namespace
}  // namespace ft
