// The decode-layer plan (cpu/decode_layer.h) as a Python class: built once per layer from the layer's weights
// (kept alive by the plan), then called once per decode step with the step's tensors -- ~8 arguments instead
// of the ~60 tensor conversions of the same layer run op by op from Python.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bind_common.h"
#include "bind_decode_step.h"
#include "cpu/decode_layer.h"

using namespace ft_bind;

namespace {

class DecodeLayerPlan {
 public:
  // ln1, ln2 [H]: bf16, or float32 (1 + w) for the (1 + w) norms (both alike).
  DecodeLayerPlan(int64_t H, int64_t N, int64_t K, int64_t D, float eps, Arr ln1, Arr ln2) {
    expect(H > 0 && N > 0 && K > 0 && D > 0 && N % K == 0, "H, N, K, D must be > 0 with N a multiple of K");
    L_.H = H, L_.N = N, L_.K = K, L_.D = D, L_.eps = eps;
    if (ln1.dtype() == nb::dtype<float>()) {
      L_.ln1_f32 = vec_f32("ln1", ln1, H);
      L_.ln2_f32 = vec_f32("ln2", ln2, H);
    } else {
      L_.ln1 = vec_bf16("ln1", ln1, H);
      L_.ln2 = vec_bf16("ln2", ln2, H);
    }
  }

  // One part of a projection given in parts ("attn": the q, k, v rows of GQA, the gated attention's or GDN's in-projection;
  // "shared_gate_up": the shared expert's gate then up rows), appended in order.
  void add_part(const std::string& which, int fmt, Arr q, OptArr scale, OptArr zero, int group, float gscale,
                int64_t cols, bool act_int8) {
    std::vector<ft::DenseRef>* v = which == "attn" ? &L_.parts : which == "shared_gate_up" ? &L_.shared.gate_up : nullptr;
    expect(v != nullptr, "add_part: which must be attn or shared_gate_up, got " + which);
    ft::ExpertBankRef b = bank(which, fmt, q, scale, zero, group, gscale, cols, std::nullopt);
    expect(b.n_experts == 1 && cols == L_.H, which + " parts must be one matrix [1, rows, row bytes] of H=" +
                                                 std::to_string(L_.H) + " columns, got " + shape_of(q));
    ft::DenseRef d;
    d.w = b.mat;
    d.act_int8 = act_int8;
    v->push_back(d);
    keep(q), keep(scale), keep(zero);
  }

  // Gated attention (Qwen3-Next family): (1 + w) norms of q and k [D] float32.
  void set_gated(Arr q_norm, Arr k_norm, bool interleaved, float scale) {
    L_.attn = ft::AttnKind::GATED;
    L_.q_norm_f32 = vec_f32("q_norm", q_norm, L_.D);
    L_.k_norm_f32 = vec_f32("k_norm", k_norm, L_.D);
    L_.rope_interleaved = interleaved, L_.attn_scale = scale;
    set_ |= 8;
  }

  // A Gated DeltaNet layer's own weights (cpu/gdn_decode.h); out_order [Hv Dv] int64 or None.
  void set_gdn(int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv, Arr conv_w, Arr neg_A, Arr dt_bias, Arr norm_w,
               OptArr out_order) {
    expect(Hk > 0 && Hv > 0 && Hv % Hk == 0 && Dk > 0 && Dv > 0, "Hk, Hv, Dk, Dv must be > 0 with Hv a multiple of Hk");
    const int64_t C = 2 * Hk * Dk + Hv * Dv;
    expect(conv_w.ndim() == 2 && int64_t(conv_w.shape(0)) == C && conv_w.shape(1) >= 1 && is_dtype(conv_w, kBf16, 16),
           "conv_w must be bfloat16 [C=" + std::to_string(C) + ", Kc], got " + shape_of(conv_w));
    ft::GdnWeights& g = L_.gdn;
    g.Hk = Hk, g.Hv = Hv, g.Dk = Dk, g.Dv = Dv, g.Kc = conv_w.shape(1);
    g.conv_w = static_cast<const uint16_t*>(conv_w.data());
    g.neg_A = vec_f32("neg_A", neg_A, Hv);
    g.dt_bias = vec_f32("dt_bias", dt_bias, Hv);
    g.norm_w = vec_bf16("norm_w", norm_w, Dv);
    g.out_order = nullptr;
    if (out_order) {
      expect(out_order->ndim() == 1 && int64_t(out_order->shape(0)) == Hv * Dv && out_order->dtype() == nb::dtype<int64_t>(),
             "out_order must be int64 [Hv Dv=" + std::to_string(Hv * Dv) + "], got " + shape_of(*out_order));
      const int64_t* o = static_cast<const int64_t*>(out_order->data());
      for (int64_t i = 0; i < Hv * Dv; ++i) expect(o[i] >= 0 && o[i] < Hv * Dv, "out_order holds an index outside [0, Hv Dv)");
      g.out_order = o;
    }
    keep(conv_w), keep(out_order);
    L_.attn = ft::AttnKind::GDN;
    set_ |= 8;
  }

  // The shared expert beside the routed ones: intermediate I; gated: times sigmoid(shared_gate x).
  void set_shared(int64_t I, bool gated) {
    expect(I > 0, "the shared expert's I must be > 0");
    L_.has_shared = true, L_.shared.I = I, L_.shared.gated = gated;
  }

  // One dense projection ("qkv", "o" or "router") in any kernel format; bias float32 [rows] or None.
  void set_dense(const std::string& which, int fmt, Arr q, OptArr scale, OptArr zero, int group, float gscale,
                 int64_t cols, OptArr bias, bool act_int8) {
    ft::DenseRef* d = which == "qkv"            ? &L_.qkv
                      : which == "o"            ? &L_.o
                      : which == "router"       ? &L_.router
                      : which == "shared_down"  ? &L_.shared.down
                      : which == "shared_gate"  ? &L_.shared.gate_w
                                                : nullptr;
    expect(d != nullptr, "set_dense: which must be qkv, o, router, shared_down or shared_gate, got " + which);
    ft::ExpertBankRef b = bank(which, fmt, q, scale, zero, group, gscale, cols, std::nullopt);
    expect(b.n_experts == 1, which + "_q must hold one matrix [1, rows, row bytes], got " + shape_of(q));
    // o's columns (N D, or Hv Dv for GDN) and the shared expert's sizes are checked where the layer runs
    const bool free_cols = which == "o" || which == "shared_down";
    const int64_t rows = which == "qkv" ? (L_.N + 2 * L_.K) * L_.D : which == "o" || which == "shared_down" ? L_.H
                       : which == "shared_gate" ? 1 : b.mat.rows;
    const int64_t want_cols = free_cols ? cols : L_.H;
    expect(b.mat.rows == rows && cols == want_cols, which + " must be [" + (which == "router" ? "E" : std::to_string(rows)) +
                                                        ", " + std::to_string(want_cols) + "], got [" +
                                                        std::to_string(b.mat.rows) + ", " + std::to_string(cols) + "]");
    d->w = b.mat;
    d->act_int8 = act_int8;
    d->bias = nullptr;
    if (bias) {
      expect(bias->ndim() == 1 && int64_t(bias->shape(0)) == b.mat.rows && bias->dtype() == nb::dtype<float>(),
             which + "_bias must be float32 [" + std::to_string(b.mat.rows) + "], got " + shape_of(*bias));
      d->bias = static_cast<const float*>(bias->data());
    }
    keep(q), keep(scale), keep(zero), keep(bias);
    set_ |= which == "qkv" ? 1 : which == "o" ? 2 : which == "router" ? 4 : 0;
  }

  void set_attention(int qk_norm, OptArr q_norm, OptArr k_norm, bool interleaved, float scale, int64_t window,
                     OptArr sinks) {
    expect(qk_norm >= 0 && qk_norm <= 2, "qk_norm must be 0 (none), 1 (per head) or 2 (whole projection)");
    L_.qk_norm = static_cast<ft::QkNorm>(qk_norm);
    if (qk_norm) {
      expect(q_norm && k_norm, "q_norm and k_norm are required with qk_norm");
      L_.q_norm = vec_bf16("q_norm", *q_norm, qk_norm == 1 ? L_.D : L_.N * L_.D);
      L_.k_norm = vec_bf16("k_norm", *k_norm, qk_norm == 1 ? L_.D : L_.K * L_.D);
    }
    expect(window >= 0, "window must be >= 0 (0: no window)");
    L_.rope_interleaved = interleaved, L_.attn_scale = scale, L_.window = window;
    L_.sinks = nullptr;
    if (sinks) {
      expect(sinks->ndim() == 1 && int64_t(sinks->shape(0)) == L_.N && sinks->dtype() == nb::dtype<float>(),
             "sinks must be float32 [N=" + std::to_string(L_.N) + "], got " + shape_of(*sinks));
      L_.sinks = static_cast<const float*>(sinks->data());
    }
    keep(sinks);
    set_ |= 8;
  }

  void set_experts(int top_k, int route, bool renorm, int64_t base,                                          //
                   int w13_fmt, Arr w13_q, OptArr w13_scale, OptArr w13_zero, int w13_group, float w13_gscale,  //
                   OptArr w13_bias, int w2_fmt, Arr w2_q, OptArr w2_scale, OptArr w2_zero, int w2_group,      //
                   float w2_gscale, OptArr w2_bias, int act, float alpha, float limit, bool act_int8) {
    expect(route == 0 || route == 1, "route must be 0 (softmax) or 1 (topk_softmax)");
    expect(act == 0 || act == 1, "act must be 0 (swiglu) or 1 (gptoss)");
    L_.w13 = bank("w13", w13_fmt, w13_q, w13_scale, w13_zero, w13_group, w13_gscale, L_.H, w13_bias);
    expect(L_.w13.mat.rows % 2 == 0, "w13 must have 2I rows (gate rows, then up rows)");
    L_.w2 = bank("w2", w2_fmt, w2_q, w2_scale, w2_zero, w2_group, w2_gscale, L_.w13.mat.rows / 2, w2_bias);
    expect(L_.w2.mat.rows == L_.H, "w2 must have H=" + std::to_string(L_.H) + " rows");
    expect(base >= 0 && top_k >= 1, "base must be >= 0 and top_k >= 1");
    L_.top_k = top_k, L_.route = static_cast<ft::RouteKind>(route), L_.renorm = renorm, L_.base = base;
    L_.act = static_cast<ft::Act>(act), L_.alpha = alpha, L_.limit = limit, L_.experts_int8 = act_int8;
    keep(w13_q), keep(w13_scale), keep(w13_zero), keep(w13_bias), keep(w2_q), keep(w2_scale), keep(w2_zero), keep(w2_bias);
    set_ |= 16;
  }

  // The layer as built, refused while a part is missing.
  const ft::DecodeLayer& layer() const {
    const int need = L_.attn == ft::AttnKind::GQA && L_.parts.empty() ? 31 : 30;  // else parts instead of qkv
    expect((set_ & need) == need && (L_.attn == ft::AttnKind::GQA || !L_.parts.empty()),
           "the plan is incomplete: set_dense(qkv or parts, o, router), the attention and set_experts first");
    expect(!L_.has_shared || (!L_.shared.gate_up.empty() && L_.shared.down.w.q && (!L_.shared.gated || L_.shared.gate_w.w.q)),
           "the plan's shared expert is incomplete: its gate_up parts, shared_down (and shared_gate) first");
    return L_;
  }

  void run(Arr x, Arr k_pool, Arr v_pool, Arr page_table, Arr ctx, Arr slots, Arr cos, Arr sin, OptArr eid_out,
           OptArr conv_state, OptArr state, OptArr state_slots) {
    const ft::DecodeLayer& L = layer();
    ft::DecodeStep s = step_of(L.H, x, page_table, ctx, slots, cos, sin);
    kv_pools_of(L, s, k_pool, v_pool);
    if (eid_out)
      expect(eid_out->ndim() == 2 && int64_t(eid_out->shape(0)) == s.T && int64_t(eid_out->shape(1)) == L.top_k &&
                 eid_out->dtype() == nb::dtype<int32_t>(),
             "eid_out must be int32 [T, top_k=" + std::to_string(L.top_k) + "], got " + shape_of(*eid_out));
    s.eid_out = eid_out ? static_cast<int32_t*>(eid_out->data()) : nullptr;
    if (L.attn == ft::AttnKind::GDN) {
      gdn_pools_of(L, s, conv_state, state);
      state_slots_of(s, state_slots);
    }
    release_and_run([&] { ft::decode_layer(L, s); });
  }

 private:
  const uint16_t* vec_bf16(const std::string& name, const Arr& a, int64_t n) {
    expect(a.ndim() == 1 && int64_t(a.shape(0)) == n && is_dtype(a, kBf16, 16),
           name + " must be bfloat16 [" + std::to_string(n) + "], got " + shape_of(a));
    keep(a);
    return static_cast<const uint16_t*>(a.data());
  }
  const float* vec_f32(const std::string& name, const Arr& a, int64_t n) {
    expect(a.ndim() == 1 && int64_t(a.shape(0)) == n && a.dtype() == nb::dtype<float>(),
           name + " must be float32 [" + std::to_string(n) + "], got " + shape_of(a));
    keep(a);
    return static_cast<const float*>(a.data());
  }
  void keep(const Arr& a) { kept_.push_back(a); }
  void keep(const OptArr& a) {
    if (a) kept_.push_back(*a);
  }

  ft::DecodeLayer L_;
  std::vector<Arr> kept_;  // the weights the plan points into
  int set_ = 0;            // bits: qkv, o, router, attention, experts
};

}  // namespace

const ft::DecodeLayer& ft_bind::plan_layer(nb::handle plan) { return nb::cast<DecodeLayerPlan&>(plan).layer(); }

void bind_decode_layer(nb::module_& m) {
  nb::class_<DecodeLayerPlan>(m, "DecodeLayerPlan",
                              "One GQA + routed-experts decoder layer of a bf16 decode step in one call "
                              "(cpu/decode_layer.h). Holds the weights it points into.")
      .def(nb::init<int64_t, int64_t, int64_t, int64_t, float, Arr, Arr>(), nb::arg("H"), nb::arg("N"), nb::arg("K"),
           nb::arg("D"), nb::arg("eps"), nb::arg("ln1"), nb::arg("ln2"))
      .def("set_dense", &DecodeLayerPlan::set_dense, nb::arg("which"), nb::arg("fmt"), nb::arg("q"),
           nb::arg("scale").none(), nb::arg("zero").none(), nb::arg("group"), nb::arg("gscale"), nb::arg("cols"),
           nb::arg("bias").none(), nb::arg("act_int8"))
      .def("set_attention", &DecodeLayerPlan::set_attention, nb::arg("qk_norm"), nb::arg("q_norm").none(),
           nb::arg("k_norm").none(), nb::arg("interleaved"), nb::arg("scale"), nb::arg("window"),
           nb::arg("sinks").none())
      .def("set_experts", &DecodeLayerPlan::set_experts, nb::arg("top_k"), nb::arg("route"), nb::arg("renorm"),
           nb::arg("base"), nb::arg("w13_fmt"), nb::arg("w13_q"), nb::arg("w13_scale").none(),
           nb::arg("w13_zero").none(), nb::arg("w13_group"), nb::arg("w13_gscale"), nb::arg("w13_bias").none(),
           nb::arg("w2_fmt"), nb::arg("w2_q"), nb::arg("w2_scale").none(), nb::arg("w2_zero").none(),
           nb::arg("w2_group"), nb::arg("w2_gscale"), nb::arg("w2_bias").none(), nb::arg("act"), nb::arg("alpha"),
           nb::arg("limit"), nb::arg("act_int8"))
      .def("add_part", &DecodeLayerPlan::add_part, nb::arg("which"), nb::arg("fmt"), nb::arg("q"),
           nb::arg("scale").none(), nb::arg("zero").none(), nb::arg("group"), nb::arg("gscale"), nb::arg("cols"),
           nb::arg("act_int8"))
      .def("set_gated", &DecodeLayerPlan::set_gated, nb::arg("q_norm"), nb::arg("k_norm"), nb::arg("interleaved"),
           nb::arg("scale"))
      .def("set_gdn", &DecodeLayerPlan::set_gdn, nb::arg("Hk"), nb::arg("Hv"), nb::arg("Dk"), nb::arg("Dv"),
           nb::arg("conv_w"), nb::arg("neg_A"), nb::arg("dt_bias"), nb::arg("norm_w"), nb::arg("out_order").none())
      .def("set_shared", &DecodeLayerPlan::set_shared, nb::arg("I"), nb::arg("gated"))
      .def("run", &DecodeLayerPlan::run, nb::arg("x"), nb::arg("k_pool"), nb::arg("v_pool"), nb::arg("page_table"),
           nb::arg("ctx_lens"), nb::arg("slots"), nb::arg("cos"), nb::arg("sin"), nb::arg("eid_out").none() = nb::none(),
           nb::arg("conv_state").none() = nb::none(), nb::arg("state").none() = nb::none(),
           nb::arg("state_slots").none() = nb::none(),
           "x [T, H] bf16 <- the layer applied (in place); the new keys and values written at slots; the routed "
           "experts into eid_out if given. GIL released.");
}
