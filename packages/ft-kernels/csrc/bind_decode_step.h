// A decode step's arguments to the decode plans (bind_decode_layer.cpp), checked into ft::DecodeStep: the tensors
// every layer of the step shares, and each layer's own pools. Each refusal names its argument. Header-only, internal.
#pragma once
#include <exception>
#include <string>

#include "bind_common.h"
#include "cpu/decode_layer.h"

namespace ft_bind {

inline const auto kBf16 = nb::dlpack::dtype_code::Bfloat;

// x [T, H] bf16, page_table [T, Pmax] int64, ctx_lens / slots [T] int64, cos / sin [T, R/2] float32 -> a step with
// those fields set (no pools yet).
inline ft::DecodeStep step_of(int64_t H, const Arr& x, const Arr& page_table, const Arr& ctx, const Arr& slots,
                              const Arr& cos, const Arr& sin) {
  expect(x.ndim() == 2 && is_dtype(x, kBf16, 16) && int64_t(x.shape(1)) == H,
         "x must be bfloat16 [T, H=" + std::to_string(H) + "], got " + shape_of(x));
  const int64_t T = x.shape(0);
  expect(page_table.ndim() == 2 && int64_t(page_table.shape(0)) == T && page_table.dtype() == nb::dtype<int64_t>(),
         "page_table must be int64 [T=" + std::to_string(T) + ", Pmax], got " + shape_of(page_table));
  for (const auto& [p, name] : {std::pair{&ctx, "ctx_lens"}, std::pair{&slots, "slots"}})
    expect(p->ndim() == 1 && int64_t(p->shape(0)) == T && p->dtype() == nb::dtype<int64_t>(),
           std::string(name) + " must be int64 [T=" + std::to_string(T) + "], got " + shape_of(*p));
  expect(cos.ndim() == 2 && int64_t(cos.shape(0)) == T && cos.dtype() == nb::dtype<float>() && sin.ndim() == 2 &&
             sin.shape(0) == cos.shape(0) && sin.shape(1) == cos.shape(1) && sin.dtype() == nb::dtype<float>(),
         "cos and sin must be float32 [T, R/2], got " + shape_of(cos) + " and " + shape_of(sin));
  ft::DecodeStep s;
  s.x = static_cast<uint16_t*>(x.data());
  s.T = T;
  s.pmax = page_table.shape(1);
  s.page_table = static_cast<const int64_t*>(page_table.data());
  s.ctx = static_cast<const int64_t*>(ctx.data());
  s.slots = static_cast<const int64_t*>(slots.data());
  s.cos = static_cast<const float*>(cos.data());
  s.sin = static_cast<const float*>(sin.data());
  s.R = 2 * int64_t(cos.shape(1));
  return s;
}

// Layer L's KV pools k_pool, v_pool [P, S, K, D] bf16 into s (a GDN layer has none: unchecked, unused).
inline void kv_pools_of(const ft::DecodeLayer& L, ft::DecodeStep& s, const Arr& k_pool, const Arr& v_pool) {
  if (L.attn == ft::AttnKind::GDN) return;
  for (const auto& [p, name] : {std::pair{&k_pool, "k_pool"}, std::pair{&v_pool, "v_pool"}})
    expect(p->ndim() == 4 && is_dtype(*p, kBf16, 16) && int64_t(p->shape(2)) == L.K && int64_t(p->shape(3)) == L.D &&
               p->shape(0) == k_pool.shape(0) && p->shape(1) == k_pool.shape(1),
           std::string(name) + " must be bfloat16 [P, S, K=" + std::to_string(L.K) + ", D=" + std::to_string(L.D) +
               "] like k_pool, got " + shape_of(*p));
  s.k_pool = static_cast<uint16_t*>(k_pool.data());
  s.v_pool = static_cast<uint16_t*>(v_pool.data());
  s.P = k_pool.shape(0), s.S = k_pool.shape(1);
}

// A GDN layer's state pools conv_state [Ns, C, Kc-1] bf16 and state [Ns, Hv, Dk, Dv] float32 into s.
inline void gdn_pools_of(const ft::DecodeLayer& L, ft::DecodeStep& s, const OptArr& conv_state, const OptArr& state) {
  const ft::GdnWeights& g = L.gdn;
  const int64_t C = 2 * g.Hk * g.Dk + g.Hv * g.Dv;
  expect(conv_state && state, "a GDN layer's plan needs conv_state and state");
  expect(conv_state->ndim() == 3 && is_dtype(*conv_state, kBf16, 16) && int64_t(conv_state->shape(1)) == C &&
             int64_t(conv_state->shape(2)) == g.Kc - 1,
         "conv_state must be bfloat16 [Ns, C, Kc-1], got " + shape_of(*conv_state));
  const int64_t Ns = conv_state->shape(0);
  expect(state->ndim() == 4 && state->dtype() == nb::dtype<float>() && int64_t(state->shape(0)) == Ns &&
             int64_t(state->shape(1)) == g.Hv && int64_t(state->shape(2)) == g.Dk && int64_t(state->shape(3)) == g.Dv,
         "state must be float32 [Ns, Hv, Dk, Dv] like conv_state, got " + shape_of(*state));
  s.conv_state = static_cast<uint16_t*>(conv_state->data());
  s.state = static_cast<float*>(state->data());
  s.Ns = Ns;
}

// Each token's slot in the GDN state pools, state_slots [T] int64, into s.
inline void state_slots_of(ft::DecodeStep& s, const OptArr& state_slots) {
  expect(state_slots && state_slots->ndim() == 1 && int64_t(state_slots->shape(0)) == s.T &&
             state_slots->dtype() == nb::dtype<int64_t>(),
         "state_slots must be int64 [T=" + std::to_string(s.T) + "]" + (state_slots ? ", got " + shape_of(*state_slots) : ""));
  s.state_slots = static_cast<const int64_t*>(state_slots->data());
}

// f() with the GIL released; its std::exception as a Python ValueError.
template <class F>
void release_and_run(F&& f) {
  std::string err;
  {
    nb::gil_scoped_release release;
    try {
      f();
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  if (!err.empty()) throw nb::value_error(err.c_str());
}

// A DecodeLayerPlan's layer (bind_decode_layer.cpp), refused while the plan is incomplete.
const ft::DecodeLayer& plan_layer(nb::handle plan);

}  // namespace ft_bind
