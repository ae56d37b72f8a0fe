// The task of gdn_decode (cpu/gdn_decode.h) in plain loops, compiled once per ISA file with that file's flags
// (the compiler vectorises the channel- and Dv-wide loops, SiLU's exp included: sigmoid.h). Internal to the
// arch/ files; in an anonymous namespace, so no ISA file's build of a template leaks into another's symbols.
#pragma once
#include <cmath>
#include <cstdint>

#include "cpu/act.h"
#include "cpu/arch/sigmoid.h"
#include "cpu/formats.h"
#include "cpu/gdn_decode.h"

namespace ft {
namespace {
namespace gdn {

// Conv + SiLU of n channels from c0 of sequence b into y[n] (fp32 of act values): the sums first (Kc = 4, the
// models' conv, unrolled so the channel loop vectorises), then the roundings and SiLU in one vector loop.
template <bool BF16>
inline void conv(const GdnDecode& p, int64_t b, int64_t c0, int64_t n, float* __restrict y) {
  const int64_t C = 2 * p.Hk * p.Dk + p.Hv * p.Dv, K1 = p.Kc - 1, P = C + p.Hv * p.Dv + 2 * p.Hv;
  const int64_t st = (p.slots[b] * C + c0) * K1, wt = c0 * p.Kc, xt = b * P + c0;
  const void *S = p.conv_state, *W = p.conv_w, *X = p.proj;
  if (K1 == 3) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = st + 3 * i, w = wt + 4 * i;
      y[i] = act_load<BF16>(S, s) * act_load<BF16>(W, w) + act_load<BF16>(S, s + 1) * act_load<BF16>(W, w + 1) +
             act_load<BF16>(S, s + 2) * act_load<BF16>(W, w + 2) + act_load<BF16>(X, xt + i) * act_load<BF16>(W, w + 3);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      float s = act_load<BF16>(X, xt + i) * act_load<BF16>(W, wt + i * p.Kc + K1);
      for (int64_t t = 0; t < K1; ++t) s += act_load<BF16>(S, st + i * K1 + t) * act_load<BF16>(W, wt + i * p.Kc + t);
      y[i] = s;
    }
  }
  for (int64_t i = 0; i < n; ++i) y[i] = act_round<BF16>(silu(act_round<BF16>(y[i])));
}

// x <- x * scale / sqrt(sum x^2 + 1e-6) over n elements.
inline void l2(float* x, int64_t n, float scale) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float r = scale / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= r;
}

// DV: Dv known at compile time (128, every released model: the state passes' row loops then carry no run-time
// trip-count checks), or 0 (read from p).
template <bool BF16, int DV>
void head(const GdnDecode& p, int64_t b, int64_t h, float* scratch) {
  const int64_t Dk = p.Dk, Dv = DV ? DV : p.Dv, kh = h / (p.Hv / p.Hk);
  const int64_t C = 2 * p.Hk * Dk + p.Hv * Dv, P = C + p.Hv * Dv + 2 * p.Hv;
  float* __restrict q = scratch;
  float* __restrict k = q + Dk;
  float* __restrict v = k + Dk;
  float* __restrict pred = v + Dv;
  float* __restrict o = pred + Dv;
  conv<BF16>(p, b, kh * Dk, Dk, q);
  conv<BF16>(p, b, p.Hk * Dk + kh * Dk, Dk, k);
  conv<BF16>(p, b, 2 * p.Hk * Dk + h * Dv, Dv, v);
  l2(q, Dk, 1.f / std::sqrt(static_cast<float>(Dk)));
  l2(k, Dk, 1.f);
  const int64_t zb = b * P + C + h * Dv, bb = b * P + C + p.Hv * Dv + h, ab = bb + p.Hv;
  const float beta = act_round<BF16>(sigmoid(act_load<BF16>(p.proj, bb)));
  const float x = act_load<BF16>(p.proj, ab) + p.dt_bias[h];
  const float decay = std::exp(p.neg_A[h] * (x > 20.f ? x : std::log1p(std::exp(x))));
  float* __restrict S = p.state + (p.slots[b] * p.Hv + h) * Dk * Dv;
  // Pass 1: S <- e^g S and pred = S^T k.
  for (int64_t j = 0; j < Dv; ++j) pred[j] = 0.f;
  for (int64_t i = 0; i < Dk; ++i) {
    float* __restrict row = S + i * Dv;
    const float ki = k[i];
    for (int64_t j = 0; j < Dv; ++j) {
      row[j] *= decay;
      pred[j] += row[j] * ki;
    }
  }
  for (int64_t j = 0; j < Dv; ++j) {
    pred[j] = (v[j] - pred[j]) * beta;  // delta
    o[j] = 0.f;
  }
  // Pass 2 (the head's state now in cache): S <- S + k delta^T and o = S^T q.
  for (int64_t i = 0; i < Dk; ++i) {
    float* __restrict row = S + i * Dv;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < Dv; ++j) {
      row[j] += ki * pred[j];
      o[j] += row[j] * qi;
    }
  }
  // Gated RMSNorm: out = act(act(w act(o / rms)) silu(z)).
  float ss = 0.f;
  for (int64_t j = 0; j < Dv; ++j) {
    o[j] = act_round<BF16>(o[j]);
    ss += o[j] * o[j];
  }
  const float r = 1.f / std::sqrt(ss / static_cast<float>(Dv) + p.eps);
  for (int64_t j = 0; j < Dv; ++j) {
    const float y = act_round<BF16>(act_load<BF16>(p.norm_w, j) * act_round<BF16>(o[j] * r));
    const float val = y * silu(act_load<BF16>(p.proj, zb + j));
    act_store<BF16>(p.out, (b * p.Hv + h) * Dv + j, val);
  }
}

}  // namespace gdn
}  // namespace

#define FT_GDN_HEAD(NAME)                                                       \
  void NAME(const GdnDecode& p, int64_t b, int64_t h, float* scratch) {         \
    if (p.Dv == 128)                                                            \
      p.bf16 ? gdn::head<true, 128>(p, b, h, scratch)                           \
             : gdn::head<false, 128>(p, b, h, scratch);                         \
    else                                                                        \
      p.bf16 ? gdn::head<true, 0>(p, b, h, scratch)                             \
             : gdn::head<false, 0>(p, b, h, scratch);                           \
  }

}  // namespace ft
