// A run of decode-layer plans (bind_decode_layer.cpp) as one Python class: a decode step's planned layers in one
// call, each layer's pools bound once.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "bind_common.h"
#include "bind_decode_step.h"
#include "cpu/decode_layer.h"

using namespace ft_bind;

namespace {

// A run of planned layers of a step in one call, in order: each layer's pools bound once (bind; again when they are
// rebuilt), the step's shared tensors checked once a step -- one Python call a step instead of one a layer.
class DecodeStackPlan {
 public:
  explicit DecodeStackPlan(nb::list layers) : held_(layers) {
    expect(nb::len(layers) > 0, "a decode stack needs at least one layer");
    for (nb::handle h : layers) {
      layers_.push_back(&plan_layer(h));
      expect(layers_.back()->H == layers_[0]->H, "the stack's layers must share H");
    }
    pools_.assign(layers_.size(), ft::DecodeStep{});
  }

  // Layer i's pools: k_pools[i], v_pools[i] [P, S, K, D] bf16 (GQA, gated) or conv_states[i], states[i] (GDN; None
  // elsewhere). The stack keeps them alive until the next bind.
  void bind(std::vector<OptArr> k_pools, std::vector<OptArr> v_pools, std::vector<OptArr> conv_states,
            std::vector<OptArr> states) {
    const size_t n = layers_.size();
    expect(k_pools.size() == n && v_pools.size() == n && conv_states.size() == n && states.size() == n,
           "bind takes one entry per layer (" + std::to_string(n) + ") in each list");
    std::vector<ft::DecodeStep> pools(n);
    for (size_t i = 0; i < n; ++i) {
      const ft::DecodeLayer& L = *layers_[i];
      if (L.attn == ft::AttnKind::GDN) {
        gdn_pools_of(L, pools[i], conv_states[i], states[i]);
      } else {
        expect(k_pools[i] && v_pools[i], "layer " + std::to_string(i) + " of the stack needs k_pool and v_pool");
        kv_pools_of(L, pools[i], *k_pools[i], *v_pools[i]);
      }
    }
    pools_ = std::move(pools);
    kept_ = {std::move(k_pools), std::move(v_pools), std::move(conv_states), std::move(states)};
    bound_ = true;
  }

  void run(Arr x, Arr page_table, Arr ctx, Arr slots, Arr cos, Arr sin, OptArr eid_out, OptArr state_slots) {
    expect(bound_, "the stack's pools are not bound: bind first");
    ft::DecodeStep s = step_of(layers_[0]->H, x, page_table, ctx, slots, cos, sin);
    const int64_t n = layers_.size(), k = eid_out && eid_out->ndim() == 3 ? eid_out->shape(2) : 0;
    if (eid_out) {
      bool ok = eid_out->ndim() == 3 && int64_t(eid_out->shape(0)) == n && int64_t(eid_out->shape(1)) == s.T &&
                eid_out->dtype() == nb::dtype<int32_t>();
      for (const ft::DecodeLayer* L : layers_) ok = ok && L->top_k == k;
      expect(ok, "eid_out must be int32 [layers=" + std::to_string(n) + ", T, top_k] (every layer's top_k), got " +
                     shape_of(*eid_out));
    }
    for (const ft::DecodeLayer* L : layers_)
      if (L->attn == ft::AttnKind::GDN) state_slots_of(s, state_slots);
    int32_t* eid = eid_out ? static_cast<int32_t*>(eid_out->data()) : nullptr;
    release_and_run([&] {
      for (int64_t i = 0; i < n; ++i) {
        ft::DecodeStep si = s;
        const ft::DecodeStep& p = pools_[i];
        si.k_pool = p.k_pool, si.v_pool = p.v_pool, si.P = p.P, si.S = p.S;
        si.conv_state = p.conv_state, si.state = p.state, si.Ns = p.Ns;
        si.eid_out = eid ? eid + i * s.T * k : nullptr;
        ft::decode_layer(*layers_[i], si);
      }
    });
  }

 private:
  nb::list held_;                             // the layer plans (they hold the weights)
  std::vector<const ft::DecodeLayer*> layers_;
  std::vector<ft::DecodeStep> pools_;         // each layer's pool fields
  std::vector<std::vector<OptArr>> kept_;     // the bound pools
  bool bound_ = false;
};

}  // namespace

void bind_decode_stack(nb::module_& m) {
  nb::class_<DecodeStackPlan>(m, "DecodeStackPlan",
                              "A run of DecodeLayerPlans of a decode step in one call, each layer's pools bound once.")
      .def(nb::init<nb::list>(), nb::arg("layers"))
      .def("bind", &DecodeStackPlan::bind, nb::arg("k_pools"), nb::arg("v_pools"), nb::arg("conv_states"),
           nb::arg("states"))
      .def("run", &DecodeStackPlan::run, nb::arg("x"), nb::arg("page_table"), nb::arg("ctx_lens"), nb::arg("slots"),
           nb::arg("cos"), nb::arg("sin"), nb::arg("eid_out").none() = nb::none(),
           nb::arg("state_slots").none() = nb::none(),
           "x [T, H] bf16 <- the layers applied in order (in place); layer i's routed experts into eid_out[i] if "
           "given. GIL released.");
}
