// The nanobind functions of the layer pieces beyond the projections: gdn_decode (the Gated DeltaNet core,
// cpu/gdn_decode.h) and gdn_prefill (its rule over a prompt, cpu/gdn_prefill.h), the gates (cpu/gates.h) and
// prefill attention (cpu/attn_prefill.h); every argument checked and named first.
#include <string>

#include "bind_common.h"
#include "cpu/attn_prefill.h"
#include "cpu/dispatch.h"
#include "cpu/gates.h"
#include "cpu/gdn_decode.h"
#include "cpu/gdn_prefill.h"

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

void gdn_prefill(Arr y, Arr g, Arr beta, Arr state, int64_t Hk, Arr out) {
  const bool bf = is_dtype(y, nb::dlpack::dtype_code::Bfloat, 16);
  expect(y.ndim() == 2 && (bf || y.dtype() == nb::dtype<float>()), "y must be float32 or bfloat16 [L, C], got " + shape_of(y));
  expect(state.ndim() == 3 && state.dtype() == nb::dtype<float>(), "state must be float32 [Hv, Dk, Dv], got " + shape_of(state));
  const int64_t L = y.shape(0), Hv = state.shape(0), Dk = state.shape(1), Dv = state.shape(2);
  expect(Hk >= 1 && Hv % Hk == 0, "Hk=" + std::to_string(Hk) + " must divide the state's Hv=" + std::to_string(Hv));
  const int64_t C = 2 * Hk * Dk + Hv * Dv;
  expect(int64_t(y.shape(1)) >= C, "y must have at least C = 2 Hk Dk + Hv Dv = " + std::to_string(C) +
                                       " columns (q | k | v first), got " + shape_of(y));
  for (const auto& [a, name] : {std::pair{&g, "g"}, std::pair{&beta, "beta"}})
    expect(a->ndim() == 2 && int64_t(a->shape(0)) == L && int64_t(a->shape(1)) == Hv && a->dtype() == nb::dtype<float>(),
           std::string(name) + " must be float32 [L=" + std::to_string(L) + ", Hv=" + std::to_string(Hv) + "], got " +
               shape_of(*a));
  expect(out.ndim() == 3 && int64_t(out.shape(0)) == L && int64_t(out.shape(1)) == Hv && int64_t(out.shape(2)) == Dv &&
             out.dtype() == nb::dtype<float>(),
         "out must be float32 [L, Hv, Dv=" + std::to_string(Dv) + "], got " + shape_of(out));
  ft::GdnPrefill p{L, Hk, Hv, Dk, Dv, bf, y.data(), int64_t(y.shape(1)), static_cast<const float*>(g.data()),
                   static_cast<const float*>(beta.data()), static_cast<float*>(state.data()),
                   static_cast<float*>(out.data())};
  nb::gil_scoped_release release;
  ft::gdn_prefill(p);
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

void prefill_attention(Arr q, Arr k_pool, Arr v_pool, Arr page_table, Arr q_lens, Arr ctx_lens, float scale,
                       int64_t window, OptArr sinks, Arr o) {
  const auto bf16 = nb::dlpack::dtype_code::Bfloat;
  expect(q.ndim() == 3 && is_dtype(q, bf16, 16), "q must be bfloat16 [T, N, D], got " + shape_of(q));
  const int64_t T = q.shape(0), N = q.shape(1), D = q.shape(2);
  expect(D % 2 == 0, "q's D=" + std::to_string(D) + " must be even");
  expect(k_pool.ndim() == 4 && is_dtype(k_pool, bf16, 16) && int64_t(k_pool.shape(3)) == D,
         "k_pool must be bfloat16 [P, S, K, D=" + std::to_string(D) + "], got " + shape_of(k_pool));
  const int64_t P = k_pool.shape(0), S = k_pool.shape(1), K = k_pool.shape(2);
  expect(K >= 1 && N % K == 0, "q's heads N=" + std::to_string(N) + " must be a multiple of k_pool's KV heads K=" + std::to_string(K));
  expect(v_pool.ndim() == 4 && is_dtype(v_pool, bf16, 16) && int64_t(v_pool.shape(0)) == P && int64_t(v_pool.shape(1)) == S &&
             int64_t(v_pool.shape(2)) == K, "v_pool must be bfloat16 [P, S, K, Dv] like k_pool, got " + shape_of(v_pool));
  const int64_t Dv = v_pool.shape(3);
  expect(page_table.ndim() == 2 && page_table.dtype() == nb::dtype<int64_t>(), "page_table must be int64 [B, Pmax], got " + shape_of(page_table));
  const int64_t B = page_table.shape(0);
  for (const auto& [a, name] : {std::pair{&q_lens, "q_lens"}, std::pair{&ctx_lens, "ctx_lens"}})
    expect(a->ndim() == 1 && int64_t(a->shape(0)) == B && a->dtype() == nb::dtype<int64_t>(),
           std::string(name) + " must be int64 [B=" + std::to_string(B) + "], got " + shape_of(*a));
  expect(window >= 0, "window must be >= 0 (0: no window)");
  if (sinks)
    expect(sinks->ndim() == 1 && int64_t(sinks->shape(0)) == N && sinks->dtype() == nb::dtype<float>(),
           "sinks must be float32 [N=" + std::to_string(N) + "], got " + shape_of(*sinks));
  expect(o.ndim() == 3 && int64_t(o.shape(0)) == T && int64_t(o.shape(1)) == N && int64_t(o.shape(2)) == Dv &&
             o.dtype() == nb::dtype<float>(), "o must be float32 [T, N, Dv], got " + shape_of(o));
  ft::PrefillAttn a{static_cast<const uint16_t*>(q.data()), static_cast<const uint16_t*>(k_pool.data()),
                    static_cast<const uint16_t*>(v_pool.data()), static_cast<const int64_t*>(page_table.data()),
                    static_cast<const int64_t*>(q_lens.data()), static_cast<const int64_t*>(ctx_lens.data()),
                    T, B, N, K, D, Dv, S, P, int64_t(page_table.shape(1)), scale, window,
                    sinks ? static_cast<const float*>(sinks->data()) : nullptr, static_cast<float*>(o.data())};
  nb::gil_scoped_release release;
  try {
    ft::prefill_attention(a);
  } catch (const std::invalid_argument& e) {
    throw nb::value_error(e.what());
  }
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
  m.def("gdn_prefill", &gdn_prefill, nb::arg("y"), nb::arg("g"), nb::arg("beta"), nb::arg("state"), nb::arg("k_heads"),
        nb::arg("out"), "The gated delta rule over one sequence's prefill tokens (cpu/gdn_prefill.h); state in place.");
  m.def("prefill_attention", &prefill_attention, nb::arg("q"), nb::arg("k_pool"), nb::arg("v_pool"), nb::arg("page_table"),
        nb::arg("q_lens"), nb::arg("ctx_lens"), nb::arg("scale"), nb::arg("window"), nb::arg("sinks").none(), nb::arg("o"),
        "Causal attention of packed new tokens over paged bf16 K/V pools (flash, weights rounded to bf16). GIL released.");
  m.def("prefill_attention_simd", &ft::attn_prefill_simd, "Whether prefill_attention runs its SIMD build here.");
  m.def("decode_attention_bf16", &ft::attn_decode_bf16_takes, nb::arg("G"), nb::arg("D"), nb::arg("Dv"),
        "Whether decode_attention multiplies bf16 q and pools with vdpbf16ps here for these shapes.");
}
