#include "cpu/decode_layer.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "cpu/attn_decode.h"
#include "cpu/bf16act.h"
#include "cpu/linear.h"
#include "cpu/norm.h"
#include "cpu/rope.h"

namespace ft {

namespace {

// Per-thread scratch that grows to the largest step seen and is reused (a decode step allocates nothing).
struct Scratch {
  std::vector<float> f;        // fp32 outputs of the projections, attention and experts
  std::vector<uint16_t> h;     // normed x
  std::vector<uint16_t> qkv;   // the projection rounded to bf16
  std::vector<uint16_t> q, k, qr, kr, v;  // per-head views made contiguous, rotated q / k
  std::vector<uint16_t> a;     // an output rounded to bf16
  std::vector<int32_t> tok, eid;
  std::vector<float> gate;
};

template <class V>
auto* grow(V& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// y = x W^T (+ b) over bf16 x [T, K] -> fp32 [T, N] (the kernel's output, not yet rounded).
void project(const DenseRef& d, const uint16_t* x, int64_t T, float* y) {
  LinearArgs a;
  a.x = x;
  a.x_bf16 = true;
  a.T = T;
  a.w = d.w;
  a.bias = d.bias;
  a.y = y;
  a.act_int8 = d.act_int8;
  linear(a);
}

// x <- bf16(x + bf16(y)) elementwise: torch's `x + y.to(bfloat16)` on bf16 tensors.
void add_rounded(uint16_t* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(f32_to_bf16(y[i])));
}

void check(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace

void decode_layer(const DecodeLayer& L, const DecodeStep& s) {
  const int64_t T = s.T, H = L.H, N = L.N, K = L.K, D = L.D;
  const int64_t W = (N + 2 * K) * D, E = L.router.w.rows;
  check(L.qkv.w.rows == W && L.qkv.w.cols == H, "decode_layer: qkv must be [(N + 2K) D, H]");
  check(L.o.w.rows == H && L.o.w.cols == N * D, "decode_layer: o must be [H, N D]");
  check(L.router.w.cols == H && L.top_k >= 1 && L.top_k <= E, "decode_layer: router must be [E, H] with 1 <= k <= E");
  check(L.w13.mat.cols == H && L.w2.mat.rows == H, "decode_layer: expert banks must take and give H columns");
  check(s.R >= 0 && s.R <= D && s.R % 2 == 0, "decode_layer: rotated dims R must be even and <= D");
  if (T == 0) return;
  thread_local Scratch b;
  float* f = grow(b.f, T * std::max({W, H, N * D, E}));
  uint16_t* h = grow(b.h, T * H);

  // attention: norm, one q/k/v projection rounded to bf16, split per head
  rms_norm(s.x, L.ln1, true, T, H, L.eps, h);
  project(L.qkv, h, T, f);
  uint16_t* qkv = grow(b.qkv, T * W);
  f32_to_bf16_n(f, T * W, qkv, nullptr);
  uint16_t *q = grow(b.q, T * N * D), *k = grow(b.k, T * K * D), *v = grow(b.v, T * K * D);
  for (int64_t t = 0; t < T; ++t) {
    std::memcpy(q + t * N * D, qkv + t * W, N * D * 2);
    std::memcpy(k + t * K * D, qkv + t * W + N * D, K * D * 2);
    std::memcpy(v + t * K * D, qkv + t * W + (N + K) * D, K * D * 2);
  }
  if (L.qk_norm == QkNorm::HEAD) {
    rms_norm(q, L.q_norm, true, T * N, D, L.eps, q);
    rms_norm(k, L.k_norm, true, T * K, D, L.eps, k);
  } else if (L.qk_norm == QkNorm::FULL) {
    rms_norm(q, L.q_norm, true, T, N * D, L.eps, q);
    rms_norm(k, L.k_norm, true, T, K * D, L.eps, k);
  }
  uint16_t *qr = grow(b.qr, T * N * D), *kr = grow(b.kr, T * K * D);
  rope(q, true, T, N, D, s.R, s.cos, s.sin, L.rope_interleaved, qr);
  rope(k, true, T, K, D, s.R, s.cos, s.sin, L.rope_interleaved, kr);
  for (int64_t t = 0; t < T; ++t) {  // the new tokens' keys and values into the pools
    check(s.slots[t] >= 0 && s.slots[t] < s.P * s.S, "decode_layer: a KV slot is outside the pools");
    std::memcpy(s.k_pool + s.slots[t] * K * D, kr + t * K * D, K * D * 2);
    std::memcpy(s.v_pool + s.slots[t] * K * D, v + t * K * D, K * D * 2);
  }
  DecodeAttn at{qr, true, s.k_pool, s.v_pool, true, s.page_table, s.ctx, T, N, K, D, D, s.S, s.P, s.pmax,
                L.attn_scale, L.window, L.sinks, f, 0};
  decode_attention(at);
  uint16_t* a = grow(b.a, T * std::max(N * D, E));
  f32_to_bf16_n(f, T * N * D, a, nullptr);
  project(L.o, a, T, f);
  add_rounded(s.x, f, T * H);

  // routed experts: norm, router logits rounded to bf16, top-k, the experts on the normed x
  rms_norm(s.x, L.ln2, true, T, H, L.eps, h);
  project(L.router, h, T, f);
  f32_to_bf16_n(f, T * E, a, f);  // f <- the logits as bf16 values
  const int64_t nr = T * L.top_k;
  int32_t *tok = grow(b.tok, nr), *eid = grow(b.eid, nr);
  float* gate = grow(b.gate, nr);
  route_topk(f, T, E, L.top_k, L.route, L.renorm, L.base, tok, eid, gate);
  if (s.eid_out) std::memcpy(s.eid_out, eid, nr * sizeof(int32_t));
  MoeArgs m;
  m.x = h;
  m.x_bf16 = true;
  m.T = T;
  m.H = H;
  m.tok = tok;
  m.eid = eid;
  m.gate = gate;
  m.R = nr;
  m.w13 = L.w13;
  m.w2 = L.w2;
  m.act = L.act;
  m.alpha = L.alpha;
  m.limit = L.limit;
  m.act_int8 = L.experts_int8;
  m.y = f;
  moe_experts(m);
  add_rounded(s.x, f, T * H);
}

}  // namespace ft
