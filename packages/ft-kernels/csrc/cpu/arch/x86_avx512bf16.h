// AVX-512 BF16 row kernel for BF16 weights over bf16 activations (cpu/bf16act.h): `vdpbf16ps` multiplies 16
// pairs of bf16 (weight, x) and adds them to 16 fp32 lanes, one instruction per 32 weight columns and token, on
// the row and x in their natural order. Included only by x86_avx512bf16_*.cpp (compiled with -mavx512bf16,
// called only on CPUs that have it).
//
// The 4-bit formats have their own (x86_avx512bf16_lut4.h, used on AMD only): on a Sapphire Rapids VM
// `vdpbf16ps` issues once per ~2.6 cycles, and a vpermw-table + vdpbf16ps MXFP4 kernel streamed 6.9 GB/s a
// core from DRAM against 8.8 for the fp32 table kernel (x86_avx512_lut4.h) on the same, exactly widened, x.
// x rows go to a zero-padded buffer (the partial last chunk reads zeros; rows a few lines longer than a
// multiple of 4 KiB, so token rows do not alias one L1 set); the weights' last chunk is a masked load. A call of
// up to bf16_stream_tokens(cols) tokens (formats.h: as many as keep x within ~30 KiB of L1, at most 8; decode: the
// weights stream once from DRAM) goes one row at a time, a single stream, from 2 tokens prefetched kBf16Ahead bytes
// ahead (x16_prefetch: non-temporally into L1 on Zen 5, else into L2); more tokens take 4-row tiles of 4 tokens,
// which load each x vector once for 4 rows (the rows come from cache after the first 4 tokens). One
// Zen 5 core, [32768, 2048] from DRAM (x on a cache line, rows_common.h: FloatBuf), 4 tokens: 4-row tiles 19-20
// GB/s, one row prefetched into L2 23, non-temporally 32.5-33. One token is prefetched only where other cores stream
// beside this one (ThreadPool::job_threads() > 1). On one thread the engine lost by it, though it helped on one long
// matrix (35-37 -> 39.5-40.6 GB/s): mid BF16 model, one sequence 42.3-44.8 -> 41.3-42.5 tok/s, four 67.5-67.9 ->
// 61.6-64.5; bench_cpu_experts T = 1: 0.89-0.99 / 0.92-0.96 -> 0.86-0.96 / 0.82-0.88; measured again, paired in
// one process: mid 46.7 -> 43.9, the 48-layer deep BF16 7.7 -> 7.2. On two Zen 5 cores (reading ~47-52 GB/s) it
// gained: top-8 of 16 Qwen3-30B-A3B-shaped BF16 experts at one token 40.7-41.2 -> 44.3-45.4 GB/s; engine, medians
// of 4 rounds paired in one process, deep BF16 8.8 -> 9.6 tok/s, mid BF16 48.4 -> 53.9. (Zen 4, one core: one row
// at T = 1 made 19.5-20.1 GB/s against 16.0-16.6 for 4-row tiles.)
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cpu/arch/rows_common.h"       // FT_UNROLL, FloatBuf, kTokBlock
#include "cpu/arch/x86_x16_prefetch.h"  // x16_prefetch
#include "cpu/bf16act.h"
#include "cpu/threadpool.h"  // ThreadPool::job_threads

namespace ft {
namespace {

inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

inline float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

// Lane i of the result = the sum of the 16 lanes of a[i]: 15 adds and 30 shuffles for 16 sums, against ~8
// instructions each for hsum16 (a tile's closing sums are a third of its work on 768-column rows).
inline __m512 hsum16x16(const __m512 (&a)[16]) {
  __m512 b[8], c[4];
  FT_UNROLL for (int i = 0; i < 8; ++i)  // 128-bit lane L of b[i]: a[2i] and a[2i + 1], two partial sums each
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  FT_UNROLL for (int m = 0; m < 4; ++m) {  // 128-bit lane L of c[m]: lane L's sums of a[4m .. 4m + 3]
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(b[2 * m]), _mm512_castps_pd(b[2 * m + 1]));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(b[2 * m]), _mm512_castps_pd(b[2 * m + 1]));
    c[m] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  }
  const __m512 e0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x44), _mm512_shuffle_f32x4(c[0], c[1], 0xee));
  const __m512 e1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x44), _mm512_shuffle_f32x4(c[2], c[3], 0xee));
  return _mm512_add_ps(_mm512_shuffle_f32x4(e0, e1, 0x88), _mm512_shuffle_f32x4(e0, e1, 0xdd));
}

// ---------------------------------------------------------------------------------------------------
// BF16 weights. NR rows x NT tokens per tile; U independent chains when the tile has few accumulators (12 or more
// chains in all: Zen 5 issues two vdpbf16ps a cycle, each waiting ~6 cycles for its accumulator).
template <int NR, int NT, int PF>
inline void bf16_tile(const uint8_t* q, int64_t qs, int64_t cols, const uint16_t* xp, int64_t ldp, float* Y,
                      int64_t ldy) {
  constexpr int U = NR * NT >= 12 || NT > kTokBlock ? 1 : NR * NT >= 6 ? 2 : 4;
  __m512 acc[U][NR][NT];
  FT_UNROLL for (int u = 0; u < U; ++u)
    FT_UNROLL for (int r = 0; r < NR; ++r)
      FT_UNROLL for (int t = 0; t < NT; ++t) acc[u][r][t] = _mm512_setzero_ps();
  const int64_t cf = cols / 32 * 32;
  int64_t c = 0;
  for (; c + 32 * U <= cf; c += 32 * U) {
    FT_UNROLL for (int u = 0; u < U; ++u) {
      __m512i w[NR];
      FT_UNROLL for (int r = 0; r < NR; ++r) {
        const uint8_t* p = q + r * qs + 2 * (c + 32 * u);
        if (PF) x16_prefetch(reinterpret_cast<const char*>(p) + PF);
        w[r] = _mm512_loadu_si512(p);
      }
      FT_UNROLL for (int t = 0; t < NT; ++t) {
        const __m512i x = _mm512_loadu_si512(xp + t * ldp + c + 32 * u);
        FT_UNROLL for (int r = 0; r < NR; ++r) acc[u][r][t] = _mm512_dpbf16_ps(acc[u][r][t], as_bh(w[r]), as_bh(x));
      }
    }
  }
  for (; c < cols; c += 32) {  // the rest, the last chunk partial: masked weight loads, x zero-padded
    const __mmask32 mk = c + 32 <= cols ? ~__mmask32(0) : (__mmask32(1) << (cols - c)) - 1;
    __m512i w[NR];
    FT_UNROLL for (int r = 0; r < NR; ++r) w[r] = _mm512_maskz_loadu_epi16(mk, q + r * qs + 2 * c);
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      const __m512i x = _mm512_loadu_si512(xp + t * ldp + c);
      FT_UNROLL for (int r = 0; r < NR; ++r) acc[0][r][t] = _mm512_dpbf16_ps(acc[0][r][t], as_bh(w[r]), as_bh(x));
    }
  }
  if constexpr (NR == 4 && NT == 4 && U == 1) {  // one vector of the 16 sums, token t's 4 rows in its 128-bit lane t
    __m512 a[16];
    FT_UNROLL for (int t = 0; t < 4; ++t) FT_UNROLL for (int r = 0; r < 4; ++r) a[4 * t + r] = acc[0][r][t];
    const __m512 s = hsum16x16(a);
    _mm_storeu_ps(Y, _mm512_castps512_ps128(s));
    _mm_storeu_ps(Y + ldy, _mm512_extractf32x4_ps(s, 1));
    _mm_storeu_ps(Y + 2 * ldy, _mm512_extractf32x4_ps(s, 2));
    _mm_storeu_ps(Y + 3 * ldy, _mm512_extractf32x4_ps(s, 3));
    return;
  }
  FT_UNROLL for (int r = 0; r < NR; ++r)
    FT_UNROLL for (int t = 0; t < NT; ++t) {
      __m512 v = acc[0][r][t];
      FT_UNROLL for (int u = 1; u < U; ++u) v = _mm512_add_ps(v, acc[u][r][t]);
      Y[t * ldy + r] = hsum16(v);
    }
}

constexpr int kBf16Ahead = 8192;  // bytes a single row stream is prefetched ahead (the X16 kernels' distance)

// 4-row tiles, rows [r0, r1) against NT <= kTokBlock tokens (a call of more tokens than one tile: the rows come from
// cache after the first tile).
template <int NT>
inline void bf16_block4(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* xp, int64_t ldp, float* Y,
                        int64_t ldy) {
  // 4 rows from 2 tokens up: 16 chains. With 2 rows (8 chains at 4 tokens) one Zen 5 core in cache, [1536, 2048],
  // did 34-48 / 49-59 / 131 GMAC/s at 4 / 8 / 128 tokens; with 4, 48-60 / 65-81 / 181-195 (the 16 closing sums
  // in one hsum16x16 included). 5 or 6 rows, or tiles of 8 tokens (2 or 3 rows), were no faster or slower.
  constexpr int NR = 4;
  int64_t r = r0;
  for (; r + NR <= r1; r += NR) bf16_tile<NR, NT, 0>(m.q + r * m.q_stride, m.q_stride, m.cols, xp, ldp, Y + (r - r0), ldy);
  for (; r < r1; ++r) bf16_tile<1, NT, 0>(m.q + r * m.q_stride, m.q_stride, m.cols, xp, ldp, Y + (r - r0), ldy);
}

// Rows [r0, r1) against NT tokens. `stream` (the call streams in one pass, bf16_stream_tokens; always at one token and
// past kTokBlock tokens): one row at a time, a single sequential stream, prefetched from 2 tokens, and at one token
// where `ahead1` (other cores stream beside this one); else 4-row tiles.
template <int NT>
inline void bf16_block(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* xp, int64_t ldp, float* Y,
                       int64_t ldy, bool stream, bool ahead1) {
  if (NT == 1 && !ahead1) {
    for (int64_t r = r0; r < r1; ++r)
      bf16_tile<1, 1, 0>(m.q + r * m.q_stride, m.q_stride, m.cols, xp, ldp, Y + (r - r0), ldy);
    return;
  }
  if (NT == 1 || NT > kTokBlock || stream) {
    for (int64_t r = r0; r < r1; ++r)
      bf16_tile<1, NT, kBf16Ahead>(m.q + r * m.q_stride, m.q_stride, m.cols, xp, ldp, Y + (r - r0), ldy);
    return;
  }
  if constexpr (NT <= kTokBlock) bf16_block4<NT>(m, r0, r1, xp, ldp, Y, ldy);
}

inline void bf16_rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                      float* Y, int64_t ldy) {
  const int64_t cols = m.cols, ldp = bf16_x_ld(cols);  // formats.h
  thread_local FloatBuf buf;
  const int64_t one_pass = bf16_stream_tokens(cols);
  uint16_t* xp = u16_buf(buf, std::max<int64_t>(one_pass, kTokBlock) * ldp);
  // up to one_pass tokens: one pass, one row at a time (each weight read once); more: tiles of kTokBlock tokens and
  // 4 rows, the rows from cache after the first tile
  const bool stream = ntok <= one_pass;
  const bool ahead1 = ntok == 1 && ThreadPool::job_threads() > 1;  // one token: prefetched beside other cores
  const int64_t tile = stream ? ntok : kTokBlock;
  for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
    const int nt = static_cast<int>(std::min<int64_t>(tile, ntok - t0));
    for (int t = 0; t < nt; ++t) {
      std::copy(X + (t0 + t) * ldx, X + (t0 + t) * ldx + cols, xp + t * ldp);
      std::fill(xp + t * ldp + cols, xp + (t + 1) * ldp, uint16_t(0));
    }
    float* Yt = Y + t0 * ldy;
    switch (nt) {
      case 8: bf16_block<8>(m, r0, r1, xp, ldp, Yt, ldy, true, false); break;
      case 7: bf16_block<7>(m, r0, r1, xp, ldp, Yt, ldy, true, false); break;
      case 6: bf16_block<6>(m, r0, r1, xp, ldp, Yt, ldy, true, false); break;
      case 5: bf16_block<5>(m, r0, r1, xp, ldp, Yt, ldy, true, false); break;
      case 4: bf16_block<4>(m, r0, r1, xp, ldp, Yt, ldy, stream, false); break;
      case 3: bf16_block<3>(m, r0, r1, xp, ldp, Yt, ldy, stream, false); break;
      case 2: bf16_block<2>(m, r0, r1, xp, ldp, Yt, ldy, stream, false); break;
      default: bf16_block<1>(m, r0, r1, xp, ldp, Yt, ldy, stream, ahead1); break;
    }
  }
}

}  // namespace
}  // namespace ft
