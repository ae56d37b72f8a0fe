// The task of gdn_prefill (cpu/gdn_prefill.h) over a block of state columns, compiled once per ISA file with that
// file's flags. Internal to the arch/ files; in an anonymous namespace, so no ISA file's build of a template leaks
// into another's symbols.
#pragma once
#include <cmath>
#include <cstdint>

#include "cpu/act.h"
#include "cpu/gdn_prefill.h"

namespace ft {
namespace {
namespace gdn_rule {

// Eight fp32 lanes (GCC / Clang vector extension; each ISA file's flags pick its instructions), unaligned.
typedef float V8 __attribute__((vector_size(32), aligned(4)));
constexpr int kVecs = kGdnBlock / 8;  // vectors a block row

// Eight floats at p as one vector (by reference: no vector passes by value, whose ABI differs between the ISA files).
inline const V8& at8(const float* p) { return *reinterpret_cast<const V8*>(p); }
inline V8& at8(float* p) { return *reinterpret_cast<V8*>(p); }

// The block of columns j0 .. j0 + nb - 1 (nb <= kGdnBlock) of value head h, in blk [Dk, kGdnBlock] from the first
// token to the last (contiguous: the state's rows are Dv apart, which maps a block's rows to few L1 sets), in
// explicit vectors (the auto-vectorised loop kept the sums on the stack). A narrower last block runs as a full one
// whose columns past nb are zeros: their v, delta and updates are 0, so they stay 0 and are not written back. Every
// sum over the Dk rows is a chain of multiply-adds per column in row order, the S^T k ones in two chains (even and
// odd rows) then added.
template <bool BF16>
void block(const GdnPrefill& p, const float* __restrict qk, int64_t h, int64_t j0, int64_t nb, float* __restrict blk) {
  constexpr int64_t W = kGdnBlock;
  const int64_t Dk = p.Dk, Dv = p.Dv, kh = h / (p.Hv / p.Hk), vc = 2 * p.Hk * Dk + h * Dv + j0;
  float* __restrict S = p.state + h * Dk * Dv + j0;
  for (int64_t i = 0; i < Dk; ++i)
    for (int64_t j = 0; j < W; ++j) blk[i * W + j] = j < nb ? S[i * Dv + j] : 0.f;
  float v[W] = {}, o_out[W];
  for (int64_t t = 0; t < p.L; ++t) {
    const float* __restrict q = qk + (t * p.Hk + kh) * 2 * Dk;
    const float* __restrict k = q + Dk;
    const float d = std::exp(p.g[t * p.Hv + h]), b = p.beta[t * p.Hv + h];
    V8 a0[kVecs] = {}, a1[kVecs] = {}, e[kVecs], o[kVecs] = {};
    int64_t i = 0;
    for (; i + 1 < Dk; i += 2) {
      const float* r = blk + i * W;
#pragma GCC unroll 4
      for (int c = 0; c < kVecs; ++c) {
        a0[c] += at8(r + 8 * c) * k[i];
        a1[c] += at8(r + W + 8 * c) * k[i + 1];
      }
    }
    for (; i < Dk; ++i)
#pragma GCC unroll 4
      for (int c = 0; c < kVecs; ++c) a0[c] += at8(blk + i * W + 8 * c) * k[i];
    for (int64_t j = 0; j < nb; ++j) v[j] = act_load<BF16>(p.y, t * p.ys + vc + j);
#pragma GCC unroll 4
    for (int c = 0; c < kVecs; ++c) e[c] = b * (at8(v + 8 * c) - d * (a0[c] + a1[c]));
    for (i = 0; i < Dk; ++i) {
      float* r = blk + i * W;
      const float ki = k[i], qi = q[i];
#pragma GCC unroll 4
      for (int c = 0; c < kVecs; ++c) {
        const V8 s = at8(r + 8 * c) * d + ki * e[c];
        at8(r + 8 * c) = s;
        o[c] += s * qi;
      }
    }
    float* out = p.out + (t * p.Hv + h) * Dv + j0;
    if (nb == W) {
#pragma GCC unroll 4
      for (int c = 0; c < kVecs; ++c) at8(out + 8 * c) = o[c];
    } else {
#pragma GCC unroll 4
      for (int c = 0; c < kVecs; ++c) at8(o_out + 8 * c) = o[c];
      for (int64_t j = 0; j < nb; ++j) out[j] = o_out[j];
    }
  }
  for (int64_t i = 0; i < Dk; ++i)
    for (int64_t j = 0; j < nb; ++j) S[i * Dv + j] = blk[i * W + j];
}

}  // namespace gdn_rule
}  // namespace

#define FT_GDN_RULE(NAME)                                                                               \
  void NAME(const GdnPrefill& p, const float* qk, int64_t h, int64_t j0, int64_t nb, float* scratch) { \
    p.bf16 ? gdn_rule::block<true>(p, qk, h, j0, nb, scratch) : gdn_rule::block<false>(p, qk, h, j0, nb, scratch); \
  }

}  // namespace ft
