#include "cpu/decode_layer.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "cpu/attn_decode.h"
#include "cpu/bf16act.h"
#include "cpu/gates.h"
#include "cpu/gdn_decode.h"
#include "cpu/linear.h"
#include "cpu/norm.h"
#include "cpu/rope.h"

namespace ft {

namespace {

// Per-thread scratch that grows to the largest step seen and is reused (a decode step allocates nothing).
struct Scratch {
  std::vector<float> f, f2;    // fp32 outputs of the projections, attention and experts
  std::vector<uint16_t> h;     // normed x
  std::vector<uint16_t> qkv;   // the projection rounded to bf16 (GDN: the in-projection)
  std::vector<uint16_t> q, k, qr, kr, v, gate;  // per-head views made contiguous, rotated q / k, the gate
  std::vector<uint16_t> a, a2; // an output rounded to bf16 (a2: its columns reordered)
  std::vector<uint16_t> y, gu, m, sh;  // routed experts' sum, shared expert's gate | up, its product, its output
  std::vector<int32_t> tok, eid;
  std::vector<float> gate_w, sg;  // the routes' gates; the shared expert's gate logit
};

template <class V>
auto* grow(V& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// linear()'s arguments for x W^T (+ b) over bf16 x [T, K], the output not yet given.
LinearArgs args_of(const DenseRef& d, const uint16_t* x, int64_t T) {
  LinearArgs a;
  a.x = x;
  a.x_bf16 = true;
  a.T = T;
  a.w = d.w;
  a.bias = d.bias;
  a.act_int8 = d.act_int8;
  return a;
}

// y = x W^T (+ b) over bf16 x [T, K] -> fp32 [T, N] (the kernel's output, not yet rounded).
void project(const DenseRef& d, const uint16_t* x, int64_t T, float* y) {
  LinearArgs a = args_of(d, x, T);
  a.y = y;
  linear(a);
}

// The rows of a projection given in parts, all parts together.
int64_t rows_of(const std::vector<DenseRef>& parts) {
  int64_t W = 0;
  for (const DenseRef& d : parts) W += d.w.rows;
  return W;
}

// out [T, sum of rows] bf16 <- each part's projection of x, rounded, side by side (torch.cat of the parts'
// bf16 outputs): one job on the pool for all the parts.
void project_parts(const std::vector<DenseRef>& parts, const uint16_t* x, int64_t T, uint16_t* out) {
  const int64_t W = rows_of(parts);
  std::vector<LinearArgs> args;
  int64_t off = 0;
  for (const DenseRef& d : parts) {
    args.push_back(args_of(d, x, T));
    args.back().y_bf16 = out + off;
    args.back().ldy_bf16 = W;
    off += d.w.rows;
  }
  linear_parts(args.data(), static_cast<int64_t>(args.size()));
}

// x <- bf16(x + bf16(y)) elementwise: torch's `x + y.to(bfloat16)` on bf16 tensors.
void add_rounded(uint16_t* x, const float* y, int64_t n) { add_bf16_n(x, nullptr, y, n); }

void check(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(what);
}

// The layer's RMSNorm of x [T, H] into h: bf16 weight (two roundings) or fp32 (1 + w) (one).
void norm(const DecodeLayer& L, bool second, const uint16_t* x, int64_t T, uint16_t* h) {
  const float* wf = second ? L.ln2_f32 : L.ln1_f32;
  if (wf)
    rms_norm(x, wf, true, T, L.H, L.eps, h, true);
  else
    rms_norm(x, second ? L.ln2 : L.ln1, true, T, L.H, L.eps, h);
}

// The new tokens' keys (rotated) and values into the pools, then attention over them into f [T, N Dv] fp32.
void attend(const DecodeLayer& L, const DecodeStep& s, const uint16_t* qr, const uint16_t* kr, const uint16_t* v,
            float* f) {
  const int64_t T = s.T, K = L.K, D = L.D;
  for (int64_t t = 0; t < T; ++t) {
    check(s.slots[t] >= 0 && s.slots[t] < s.P * s.S, "decode_layer: a KV slot is outside the pools");
    std::memcpy(s.k_pool + s.slots[t] * K * D, kr + t * K * D, K * D * 2);
    std::memcpy(s.v_pool + s.slots[t] * K * D, v + t * K * D, K * D * 2);
  }
  DecodeAttn at{qr, true, s.k_pool, s.v_pool, true, s.page_table, s.ctx, T, L.N, K, D, D, s.S, s.P, s.pmax,
                L.attn_scale, L.window, L.sinks, f, 0};
  decode_attention(at);
}

// GQA: one q/k/v projection (or its parts) rounded to bf16, split per head, QK norm, rotary, attention, o.
void attn_gqa(const DecodeLayer& L, const DecodeStep& s, Scratch& b, const uint16_t* h, float* f) {
  const int64_t T = s.T, N = L.N, K = L.K, D = L.D, W = (N + 2 * K) * D;
  uint16_t* qkv = grow(b.qkv, T * W);
  if (L.parts.empty()) {
    project(L.qkv, h, T, f);
    f32_to_bf16_n(f, T * W, qkv, nullptr);
  } else {  // q, k, v in their own formats
    project_parts(L.parts, h, T, qkv);
  }
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
  attend(L, s, qr, kr, v, f);
  uint16_t* a = grow(b.a, T * N * D);
  f32_to_bf16_n(f, T * N * D, a, nullptr);
  project(L.o, a, T, f);
}

// GATED: the parts' projection (per head D query and D gate columns, then k, then v), (1 + w) norms of q and k
// per head, rotary, attention, o * sigmoid(gate), o.
void attn_gated(const DecodeLayer& L, const DecodeStep& s, Scratch& b, const uint16_t* h, float* f) {
  const int64_t T = s.T, N = L.N, K = L.K, D = L.D, W = 2 * N * D + 2 * K * D;
  uint16_t* qkv = grow(b.qkv, T * W);
  project_parts(L.parts, h, T, qkv);
  uint16_t *q = grow(b.q, T * N * D), *g = grow(b.gate, T * N * D), *k = grow(b.k, T * K * D),
           *v = grow(b.v, T * K * D);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      std::memcpy(q + (t * N + n) * D, qkv + t * W + 2 * n * D, D * 2);
      std::memcpy(g + (t * N + n) * D, qkv + t * W + 2 * n * D + D, D * 2);
    }
    std::memcpy(k + t * K * D, qkv + t * W + 2 * N * D, K * D * 2);
    std::memcpy(v + t * K * D, qkv + t * W + 2 * N * D + K * D, K * D * 2);
  }
  rms_norm(q, L.q_norm_f32, true, T * N, D, L.eps, q, true);
  rms_norm(k, L.k_norm_f32, true, T * K, D, L.eps, k, true);
  uint16_t *qr = grow(b.qr, T * N * D), *kr = grow(b.kr, T * K * D);
  rope(q, true, T, N, D, s.R, s.cos, s.sin, L.rope_interleaved, qr);
  rope(k, true, T, K, D, s.R, s.cos, s.sin, L.rope_interleaved, kr);
  attend(L, s, qr, kr, v, f);
  uint16_t* a = grow(b.a, T * N * D);
  f32_to_bf16_n(f, T * N * D, a, nullptr);
  sigmoid_mul(a, g, true, T, N * D, N * D, a);
  project(L.o, a, T, f);
}

// GDN: the parts' in-projection, the Gated DeltaNet core on the state pools (in place), the out-projection.
void attn_gdn(const DecodeLayer& L, const DecodeStep& s, Scratch& b, const uint16_t* h, float* f) {
  const GdnWeights& w = L.gdn;
  const int64_t T = s.T, P = rows_of(L.parts), V = w.Hv * w.Dv;
  check(s.conv_state && s.state && s.state_slots, "decode_layer: a GDN layer needs its state pools and slots");
  uint16_t* proj = grow(b.qkv, T * P);
  project_parts(L.parts, h, T, proj);
  uint16_t* a = grow(b.a, T * V);
  GdnDecode p{T,    s.Ns,     w.Hk,         w.Hv,        w.Dk,           w.Dv,      w.Kc,     true,    proj,
              w.conv_w, s.conv_state, s.state, s.state_slots, w.neg_A, w.dt_bias, w.norm_w, L.eps, a};
  gdn_decode(p);
  if (w.out_order) {
    uint16_t* a2 = grow(b.a2, T * V);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < V; ++i) a2[t * V + i] = a[t * V + w.out_order[i]];
    a = a2;
  }
  project(L.o, a, T, f);
}

// The shared expert on the normed h into sh [T, H] bf16: down(silu(gate h) * up h) (* sigmoid(gate_w h)).
void shared_expert(const SharedExpert& e, int64_t T, int64_t H, Scratch& b, const uint16_t* h, float* f,
                   uint16_t* sh) {
  const int64_t I = e.I;
  uint16_t *gu = grow(b.gu, T * 2 * I), *m = grow(b.m, T * I);
  project_parts(e.gate_up, h, T, gu);
  for (int64_t t = 0; t < T; ++t) silu_mul(gu + t * 2 * I, gu + t * 2 * I + I, true, I, m + t * I);
  project(e.down, m, T, f);
  f32_to_bf16_n(f, T * H, sh, nullptr);
  if (e.gated) {
    float* gw = grow(b.sg, T);
    project(e.gate_w, h, T, gw);
    uint16_t* g = grow(b.gate, T);
    f32_to_bf16_n(gw, T, g, nullptr);
    sigmoid_mul(sh, g, true, T, H, 1, sh);
  }
}

}  // namespace

void decode_layer(const DecodeLayer& L, const DecodeStep& s) {
  const int64_t T = s.T, H = L.H, N = L.N, K = L.K, D = L.D, E = L.router.w.rows;
  if (L.attn == AttnKind::GQA) {
    check(L.parts.empty() ? L.qkv.w.rows == (N + 2 * K) * D && L.qkv.w.cols == H : rows_of(L.parts) == (N + 2 * K) * D,
          "decode_layer: qkv (or its parts) must be [(N + 2K) D, H]");
    check(L.o.w.rows == H && L.o.w.cols == N * D, "decode_layer: o must be [H, N D]");
  } else if (L.attn == AttnKind::GATED) {
    check(rows_of(L.parts) == 2 * N * D + 2 * K * D, "decode_layer: the gated attention's parts must give 2ND + 2KD rows");
    check(L.o.w.rows == H && L.o.w.cols == N * D, "decode_layer: o must be [H, N D]");
    check(L.q_norm_f32 && L.k_norm_f32, "decode_layer: gated attention needs q and k (1 + w) norms");
  } else {
    const GdnWeights& w = L.gdn;
    check(rows_of(L.parts) == 2 * w.Hk * w.Dk + 2 * w.Hv * w.Dv + 2 * w.Hv, "decode_layer: the GDN parts must give C + Hv Dv + 2 Hv rows");
    check(L.o.w.rows == H && L.o.w.cols == w.Hv * w.Dv, "decode_layer: the GDN out-projection must be [H, Hv Dv]");
  }
  for (const DenseRef& d : L.parts) check(d.w.cols == H, "decode_layer: every part must take H columns");
  check(L.router.w.cols == H && L.top_k >= 1 && L.top_k <= E, "decode_layer: router must be [E, H] with 1 <= k <= E");
  check(L.w13.mat.cols == H && L.w2.mat.rows == H, "decode_layer: expert banks must take and give H columns");
  check(s.R >= 0 && s.R <= D && s.R % 2 == 0, "decode_layer: rotated dims R must be even and <= D");
  if (L.has_shared) {
    const SharedExpert& e = L.shared;
    for (const DenseRef& d : e.gate_up) check(d.w.cols == H, "decode_layer: shared gate/up must take H columns");
    check(rows_of(e.gate_up) == 2 * e.I && e.down.w.rows == H && e.down.w.cols == e.I, "decode_layer: shared expert must be [2I, H] and [H, I]");
    check(!e.gated || (e.gate_w.w.rows == 1 && e.gate_w.w.cols == H), "decode_layer: shared gate must be [1, H]");
  }
  if (T == 0) return;
  thread_local Scratch b;
  int64_t widest = std::max({H, N * D, E, L.gdn.Hv * L.gdn.Dv});
  for (const DenseRef& d : L.parts) widest = std::max(widest, d.w.rows);
  if (L.has_shared)
    for (const DenseRef& d : L.shared.gate_up) widest = std::max(widest, d.w.rows);
  if (L.attn == AttnKind::GQA) widest = std::max(widest, (N + 2 * K) * D);
  float* f = grow(b.f, T * widest);
  uint16_t* h = grow(b.h, T * H);

  norm(L, false, s.x, T, h);
  if (L.attn == AttnKind::GQA)
    attn_gqa(L, s, b, h, f);
  else if (L.attn == AttnKind::GATED)
    attn_gated(L, s, b, h, f);
  else
    attn_gdn(L, s, b, h, f);
  add_rounded(s.x, f, T * H);

  // routed experts: norm, router logits rounded to bf16, top-k, the experts on the normed x
  norm(L, true, s.x, T, h);
  project(L.router, h, T, f);
  uint16_t* a = grow(b.a, T * std::max(N * D, E));
  f32_to_bf16_n(f, T * E, a, f);  // f <- the logits as bf16 values
  const int64_t nr = T * L.top_k;
  int32_t *tok = grow(b.tok, nr), *eid = grow(b.eid, nr);
  float* gate = grow(b.gate_w, nr);
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
  if (!L.has_shared) {
    add_rounded(s.x, f, T * H);
    return;
  }
  // y = bf16(routed) + shared, in bf16; then x + y
  uint16_t *y = grow(b.y, T * H), *sh = grow(b.sh, T * H);
  f32_to_bf16_n(f, T * H, y, nullptr);
  shared_expert(L.shared, T, H, b, h, grow(b.f2, T * widest), sh);
  add_bf16_n(y, sh, nullptr, T * H);
  add_bf16_n(s.x, y, nullptr, T * H);
}

}  // namespace ft
