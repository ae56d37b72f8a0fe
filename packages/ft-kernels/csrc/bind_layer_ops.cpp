// The nanobind functions of a decode step's layer pieces beyond the projections: gdn_decode (the Gated
// DeltaNet core, cpu/gdn_decode.h) and the gates (cpu/gates.h); every argument checked and named first.
#include <string>

#include "bind_common.h"
#include "cpu/gates.h"
#include "cpu/gdn_decode.h"

using namespace ft_bind;

namespace {

void gdn_decode(Arr proj, Arr conv_w, Arr conv_state, Arr state, Arr slots, Arr neg_A, Arr dt_bias, Arr norm_w,
                float eps, int64_t Hk, Arr out) {
  const bool bf = is_dtype(proj, nb::dlpack::dtype_code::Bfloat, 16);
  expect(proj.ndim() == 2 && (bf || proj.dtype() == nb::dtype<float>()),
         "proj must be float32 or bfloat16 [B, C + Hv Dv + 2 Hv], got " + shape_of(proj));
  expect(state.ndim() == 4 && state.dtype() == nb::dtype<float>(), "state must be float32 [N, Hv, Dk, Dv], got " + shape_of(state));
  const int64_t B = proj.shape(0), N = state.shape(0), Hv = state.shape(1), Dk = state.shape(2), Dv = state.shape(3);
  expect(Hk >= 1 && Hv % Hk == 0, "Hk=" + std::to_string(Hk) + " must divide the state's Hv=" + std::to_string(Hv));
  const int64_t C = 2 * Hk * Dk + Hv * Dv;
  expect(int64_t(proj.shape(1)) == C + Hv * Dv + 2 * Hv,
         "proj must have C + Hv Dv + 2 Hv = " + std::to_string(C + Hv * Dv + 2 * Hv) + " columns, got " + shape_of(proj));
  expect(conv_w.ndim() == 2 && conv_w.dtype() == proj.dtype() && int64_t(conv_w.shape(0)) == C && conv_w.shape(1) >= 1,
         "conv_w must be [C=" + std::to_string(C) + ", Kc] in proj's dtype, got " + shape_of(conv_w));
  const int64_t Kc = conv_w.shape(1);
  expect(conv_state.ndim() == 3 && conv_state.dtype() == proj.dtype() && int64_t(conv_state.shape(0)) == N &&
             int64_t(conv_state.shape(1)) == C && int64_t(conv_state.shape(2)) == Kc - 1,
         "conv_state must be [N=" + std::to_string(N) + ", C=" + std::to_string(C) + ", Kc-1=" + std::to_string(Kc - 1) +
             "] in proj's dtype, got " + shape_of(conv_state));
  expect(slots.ndim() == 1 && int64_t(slots.shape(0)) == B && slots.dtype() == nb::dtype<int64_t>(),
         "slots must be int64 [B=" + std::to_string(B) + "], got " + shape_of(slots));
  for (const auto& [a, name] : {std::pair{&neg_A, "neg_A"}, std::pair{&dt_bias, "dt_bias"}})
    expect(a->ndim() == 1 && int64_t(a->shape(0)) == Hv && a->dtype() == nb::dtype<float>(),
           std::string(name) + " must be float32 [Hv=" + std::to_string(Hv) + "], got " + shape_of(*a));
  expect(norm_w.ndim() == 1 && int64_t(norm_w.shape(0)) == Dv && norm_w.dtype() == proj.dtype(),
         "norm_w must be [Dv=" + std::to_string(Dv) + "] in proj's dtype, got " + shape_of(norm_w));
  expect(out.ndim() == 2 && int64_t(out.shape(0)) == B && int64_t(out.shape(1)) == Hv * Dv && out.dtype() == proj.dtype(),
         "out must be [B, Hv Dv=" + std::to_string(Hv * Dv) + "] in proj's dtype, got " + shape_of(out));
  ft::GdnDecode p{B, N, Hk, Hv, Dk, Dv, Kc, bf, proj.data(), conv_w.data(), conv_state.data(),
                  static_cast<float*>(state.data()), static_cast<const int64_t*>(slots.data()),
                  static_cast<const float*>(neg_A.data()), static_cast<const float*>(dt_bias.data()), norm_w.data(),
                  eps, out.data()};
  nb::gil_scoped_release release;
  try {
    ft::gdn_decode(p);
  } catch (const std::invalid_argument& e) {
    throw nb::value_error(e.what());
  }
}

bool act_dtype(const Arr& a) {  // true: bfloat16, false: float32; else refused
  const bool b = is_dtype(a, nb::dlpack::dtype_code::Bfloat, 16);
  expect(b || a.dtype() == nb::dtype<float>(), "tensors must be float32 or bfloat16");
  return b;
}

void sigmoid_mul(Arr a, Arr g, Arr y) {
  const bool bf = act_dtype(a);
  expect(a.ndim() == 2, "a must be [T, C], got " + shape_of(a));
  const int64_t T = a.shape(0), C = a.shape(1);
  expect(g.ndim() == 2 && int64_t(g.shape(0)) == T && (int64_t(g.shape(1)) == C || g.shape(1) == 1) &&
             g.dtype() == a.dtype(),
         "g must be [T, C] or [T, 1] in a's dtype, got " + shape_of(g));
  expect(y.ndim() == 2 && y.dtype() == a.dtype() && y.size() == a.size(), "y must be shaped and typed like a");
  nb::gil_scoped_release release;
  ft::sigmoid_mul(a.data(), g.data(), bf, T, C, g.shape(1), y.data());
}

void silu_mul(Arr g, Arr u, Arr y) {
  const bool bf = act_dtype(g);
  expect(u.dtype() == g.dtype() && u.size() == g.size() && y.dtype() == g.dtype() && y.size() == g.size(),
         "g, u and y must have one dtype and size, got " + shape_of(g) + ", " + shape_of(u) + ", " + shape_of(y));
  nb::gil_scoped_release release;
  ft::silu_mul(g.data(), u.data(), bf, static_cast<int64_t>(g.size()), y.data());
}

}  // namespace

void bind_layer_ops(nb::module_& m) {
  m.def("sigmoid_mul", &sigmoid_mul, nb::arg("a"), nb::arg("g"), nb::arg("y"),
        "y = a * sigmoid(g) (g per element or per row), rounded as torch's two ops. GIL released.");
  m.def("silu_mul", &silu_mul, nb::arg("g"), nb::arg("u"), nb::arg("y"),
        "y = silu(g) * u, rounded as torch's two ops. GIL released.");
  m.def("gdn_decode", &gdn_decode, nb::arg("proj"), nb::arg("conv_w"), nb::arg("conv_state"), nb::arg("state"),
        nb::arg("slots"), nb::arg("neg_A"), nb::arg("dt_bias"), nb::arg("norm_w"), nb::arg("eps"), nb::arg("Hk"),
        nb::arg("out"),
        "Gated DeltaNet decode core: conv, norms, delta rule and gated RMSNorm; states updated in place. GIL released.");
}
