// The module's functions: argument checks that name the argument (bind_common.h), then the Python-free core
// with the GIL released. Tensors arrive by DLPack without copies. The decode-layer plan is bound in
// bind_decode_layer.cpp, a run of them in bind_decode_stack.cpp.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bind_common.h"
#include "cpu/attn_decode.h"
#include "cpu/dispatch.h"
#include "cpu/repack.h"
#include "cpu/linear.h"
#include "cpu/moe_ffn.h"
#include "cpu/norm.h"
#include "cpu/rope.h"
#include "cpu/router.h"
#include "cpu/threadpool.h"

void bind_decode_layer(nb::module_& m);
void bind_decode_stack(nb::module_& m);
void bind_layer_ops(nb::module_& m);
void bind_host_branch(nb::module_& m);

namespace {

using namespace ft_bind;

void moe_experts(Arr x, Arr tok, Arr eid, Arr gate,                                                      //
                 int w13_fmt, Arr w13_q, OptArr w13_scale, OptArr w13_zero, int w13_group, float w13_gscale,  //
                 OptArr w13_bias,                                                                          //
                 int w2_fmt, Arr w2_q, OptArr w2_scale, OptArr w2_zero, int w2_group, float w2_gscale,       //
                 OptArr w2_bias, int act, float alpha, float limit, Arr y, bool act_int8) {
  bool xb = is_dtype(x, nb::dlpack::dtype_code::Bfloat, 16);
  expect(x.ndim() == 2 && (x.dtype() == nb::dtype<float>() || xb), "x must be float32 or bfloat16 [T, H], got " + shape_of(x));
  int64_t T = x.shape(0), H = x.shape(1);
  expect(tok.ndim() == 1 && tok.dtype() == nb::dtype<int32_t>(), "tok must be int32 [R]");
  int64_t R = tok.shape(0);
  expect(eid.ndim() == 1 && eid.dtype() == nb::dtype<int32_t>() && int64_t(eid.shape(0)) == R,
         "eid must be int32 [R] with R=" + std::to_string(R));
  expect(gate.ndim() == 1 && gate.dtype() == nb::dtype<float>() && int64_t(gate.shape(0)) == R,
         "gate must be float32 [R] with R=" + std::to_string(R));
  expect(y.ndim() == 2 && y.dtype() == nb::dtype<float>() && int64_t(y.shape(0)) == T && int64_t(y.shape(1)) == H,
         "y must be float32 [T, H] like x, got " + shape_of(y));
  expect(act == 0 || act == 1, "act must be 0 (swiglu) or 1 (gptoss)");
  ft::MoeArgs a;
  a.w13 = bank("w13", w13_fmt, w13_q, w13_scale, w13_zero, w13_group, w13_gscale, H, w13_bias);
  expect(a.w13.mat.rows % 2 == 0, "w13 must have 2I rows (gate rows, then up rows)");
  a.w2 = bank("w2", w2_fmt, w2_q, w2_scale, w2_zero, w2_group, w2_gscale, a.w13.mat.rows / 2, w2_bias);
  a.x = x.data();
  a.x_bf16 = xb;
  a.T = T;
  a.H = H;
  a.tok = static_cast<const int32_t*>(tok.data());
  a.eid = static_cast<const int32_t*>(eid.data());
  a.gate = static_cast<const float*>(gate.data());
  a.R = R;
  a.act = static_cast<ft::Act>(act);
  a.alpha = alpha;
  a.limit = limit;
  a.act_int8 = act_int8;
  a.y = static_cast<float*>(y.data());
  std::string err;
  {
    nb::gil_scoped_release release;
    try {
      ft::moe_experts(a);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  if (!err.empty()) throw nb::value_error(err.c_str());
}

void linear(Arr x, int w_fmt, Arr w_q, OptArr w_scale, OptArr w_zero, int w_group, float w_gscale, int64_t cols,
            OptArr bias, Arr y, bool act_int8) {
  bool xb = is_dtype(x, nb::dlpack::dtype_code::Bfloat, 16);
  expect(x.ndim() == 2 && (x.dtype() == nb::dtype<float>() || xb), "x must be float32 or bfloat16 [T, K], got " + shape_of(x));
  expect(int64_t(x.shape(1)) == cols, "x has " + std::to_string(x.shape(1)) + " columns, w has K=" + std::to_string(cols));
  ft::ExpertBankRef b = bank("w", w_fmt, w_q, w_scale, w_zero, w_group, w_gscale, cols, std::nullopt);
  expect(b.n_experts == 1, "w must hold one matrix [1, N, row bytes], got " + shape_of(w_q));
  const int64_t T = x.shape(0), N = b.mat.rows;
  const bool yb = is_dtype(y, nb::dlpack::dtype_code::Bfloat, 16);
  expect(y.ndim() == 2 && (y.dtype() == nb::dtype<float>() || yb) && int64_t(y.shape(0)) == T && int64_t(y.shape(1)) == N,
         "y must be float32 or bfloat16 [T, N] = [" + std::to_string(T) + ", " + std::to_string(N) + "], got " + shape_of(y));
  if (bias)
    expect(bias->ndim() == 1 && int64_t(bias->shape(0)) == N && bias->dtype() == nb::dtype<float>(),
           "bias must be float32 [N=" + std::to_string(N) + "], got " + shape_of(*bias));
  ft::LinearArgs a;
  a.x = x.data();
  a.x_bf16 = xb;
  a.T = T;
  a.w = b.mat;
  a.bias = bias ? static_cast<const float*>(bias->data()) : nullptr;
  a.y = yb ? nullptr : static_cast<float*>(y.data());
  a.y_bf16 = yb ? static_cast<uint16_t*>(y.data()) : nullptr;
  a.act_int8 = act_int8;
  std::string err;
  {
    nb::gil_scoped_release release;
    try {
      ft::linear(a);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  if (!err.empty()) throw nb::value_error(err.c_str());
}

void rms_norm(Arr x, Arr w, float eps, Arr y) {
  const bool xb = is_dtype(x, nb::dlpack::dtype_code::Bfloat, 16), xf = x.dtype() == nb::dtype<float>();
  expect(x.ndim() >= 1 && (xb || xf), "x must be float32 or bfloat16 [..., D], got " + shape_of(x));
  const int64_t D = x.shape(x.ndim() - 1);
  const bool wf = w.dtype() == nb::dtype<float>();
  expect(w.ndim() == 1 && int64_t(w.shape(0)) == D && (w.dtype() == x.dtype() || wf),
         "w must be [D=" + std::to_string(D) + "] in x's dtype or float32, got " + shape_of(w));
  expect(y.ndim() == x.ndim() && y.dtype() == x.dtype() && y.size() == x.size(), "y must be shaped and typed like x");
  const int64_t rows = D ? static_cast<int64_t>(x.size()) / D : 0;
  nb::gil_scoped_release release;
  ft::rms_norm_rows(x.data(), w.data(), xb, rows, D, eps, y.data(), wf);
}

void decode_attention(Arr q, Arr k_pool, Arr v_pool, Arr page_table, Arr ctx_lens, float scale, int64_t window,
                      OptArr sinks, Arr o, int64_t split_keys) {
  const auto bf16 = nb::dlpack::dtype_code::Bfloat;
  const bool qb = is_dtype(q, bf16, 16), kb = is_dtype(k_pool, bf16, 16);
  expect(q.ndim() == 3 && (qb || q.dtype() == nb::dtype<float>()), "q must be float32 or bfloat16 [B, N, D], got " + shape_of(q));
  expect(k_pool.ndim() == 4 && (kb || k_pool.dtype() == nb::dtype<float>()),
         "k_pool must be float32 or bfloat16 [P, S, K, D], got " + shape_of(k_pool));
  const int64_t B = q.shape(0), N = q.shape(1), D = q.shape(2);
  const int64_t P = k_pool.shape(0), S = k_pool.shape(1), K = k_pool.shape(2);
  expect(k_pool.shape(3) == size_t(D), "k_pool's last dimension must be q's D=" + std::to_string(D) + ", got " + shape_of(k_pool));
  expect(K >= 1 && N % K == 0, "q's heads N=" + std::to_string(N) + " must be a multiple of k_pool's KV heads K=" + std::to_string(K));
  expect(v_pool.ndim() == 4 && v_pool.dtype() == k_pool.dtype() && v_pool.shape(0) == size_t(P) && v_pool.shape(1) == size_t(S) &&
             v_pool.shape(2) == size_t(K), "v_pool must be [P, S, K, Dv] in k_pool's dtype, got " + shape_of(v_pool));
  const int64_t Dv = v_pool.shape(3);
  expect(page_table.ndim() == 2 && page_table.shape(0) == size_t(B) && page_table.dtype() == nb::dtype<int64_t>(),
         "page_table must be int64 [B=" + std::to_string(B) + ", Pmax], got " + shape_of(page_table));
  expect(ctx_lens.ndim() == 1 && ctx_lens.shape(0) == size_t(B) && ctx_lens.dtype() == nb::dtype<int64_t>(),
         "ctx_lens must be int64 [B=" + std::to_string(B) + "], got " + shape_of(ctx_lens));
  expect(window >= 0, "window must be >= 0 (0: no window)");
  expect(split_keys >= 0, "split_keys must be >= 0 (0: the default)");
  if (sinks)
    expect(sinks->ndim() == 1 && sinks->shape(0) == size_t(N) && sinks->dtype() == nb::dtype<float>(),
           "sinks must be float32 [N=" + std::to_string(N) + "], got " + shape_of(*sinks));
  expect(o.ndim() == 3 && o.shape(0) == size_t(B) && o.shape(1) == size_t(N) && o.shape(2) == size_t(Dv) &&
             o.dtype() == nb::dtype<float>(), "o must be float32 [B, N, Dv], got " + shape_of(o));
  ft::DecodeAttn a{q.data(), qb, k_pool.data(), v_pool.data(), kb,
                   static_cast<const int64_t*>(page_table.data()), static_cast<const int64_t*>(ctx_lens.data()),
                   B, N, K, D, Dv, S, P, int64_t(page_table.shape(1)), scale, window,
                   sinks ? static_cast<const float*>(sinks->data()) : nullptr, static_cast<float*>(o.data()),
                   split_keys};
  nb::gil_scoped_release release;
  try {
    ft::decode_attention(a);
  } catch (const std::invalid_argument& e) {
    throw nb::value_error(e.what());
  }
}

void route_topk(Arr logits, int k, int kind, bool renorm, int64_t base, Arr tok, Arr eid, Arr gate) {
  expect(logits.ndim() == 2 && logits.dtype() == nb::dtype<float>(), "logits must be float32 [T, E], got " + shape_of(logits));
  const int64_t T = logits.shape(0), E = logits.shape(1);
  expect(k >= 1 && k <= E, "k must be in [1, E=" + std::to_string(E) + "], got " + std::to_string(k));
  expect(kind == 0 || kind == 1, "kind must be 0 (softmax) or 1 (topk_softmax)");
  expect(base >= 0 && base + E <= (int64_t(1) << 31) - 1, "base must keep expert ids within int32");
  for (const auto& [a, name, dt] : {std::tuple{&tok, "tok", nb::dtype<int32_t>()}, std::tuple{&eid, "eid", nb::dtype<int32_t>()},
                                    std::tuple{&gate, "gate", nb::dtype<float>()}})
    expect(a->ndim() == 1 && int64_t(a->shape(0)) == T * k && a->dtype() == dt,
           std::string(name) + " must be [T*k=" + std::to_string(T * k) + "] of " + (name[0] == 'g' ? "float32" : "int32") +
               ", got " + shape_of(*a));
  nb::gil_scoped_release release;
  ft::route_topk(static_cast<const float*>(logits.data()), T, E, k, static_cast<ft::RouteKind>(kind), renorm, base,
                 static_cast<int32_t*>(tok.data()), static_cast<int32_t*>(eid.data()), static_cast<float*>(gate.data()));
}

void rope(Arr x, Arr cos, Arr sin, bool interleaved, Arr y) {
  const bool xb = is_dtype(x, nb::dlpack::dtype_code::Bfloat, 16), xf = x.dtype() == nb::dtype<float>();
  expect(x.ndim() == 3 && (xb || xf), "x must be float32 or bfloat16 [T, H, D], got " + shape_of(x));
  const int64_t T = x.shape(0), H = x.shape(1), D = x.shape(2);
  expect(cos.ndim() == 2 && cos.shape(0) == size_t(T) && cos.dtype() == nb::dtype<float>(),
         "cos must be float32 [T=" + std::to_string(T) + ", R/2], got " + shape_of(cos));
  const int64_t R = 2 * int64_t(cos.shape(1));
  expect(R <= D, "cos's R/2=" + std::to_string(R / 2) + " rotates more than x's D=" + std::to_string(D) + " dims");
  expect(sin.ndim() == 2 && sin.shape(0) == cos.shape(0) && sin.shape(1) == cos.shape(1) && sin.dtype() == nb::dtype<float>(),
         "sin must be shaped and typed like cos, got " + shape_of(sin));
  expect(y.ndim() == 3 && y.dtype() == x.dtype() && y.size() == x.size(), "y must be shaped and typed like x");
  nb::gil_scoped_release release;
  ft::rope(x.data(), xb, T, H, D, R, static_cast<const float*>(cos.data()), static_cast<const float*>(sin.data()),
           interleaved, y.data());
}

std::string isa() {
  try {
    return ft::active_isa();
  } catch (const std::exception& e) {
    throw nb::value_error(e.what());
  }
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "ft CPU expert kernels";
  bind_decode_layer(m);
  bind_decode_stack(m);
  bind_layer_ops(m);
  bind_host_branch(m);
  m.def("moe_experts", &moe_experts, nb::arg("x"), nb::arg("tok"), nb::arg("eid"), nb::arg("gate"),
        nb::arg("w13_fmt"), nb::arg("w13_q"), nb::arg("w13_scale").none(), nb::arg("w13_zero").none(),
        nb::arg("w13_group"), nb::arg("w13_gscale"), nb::arg("w13_bias").none(), nb::arg("w2_fmt"), nb::arg("w2_q"),
        nb::arg("w2_scale").none(), nb::arg("w2_zero").none(), nb::arg("w2_group"), nb::arg("w2_gscale"),
        nb::arg("w2_bias").none(), nb::arg("act"), nb::arg("alpha"), nb::arg("limit"), nb::arg("y"),
        nb::arg("act_int8") = false,
        "y[T,H] = sum of gate * expert(x) over routes, weights dequantised in-kernel, fp32 math. GIL released.");
  m.def("linear", &linear, nb::arg("x"), nb::arg("w_fmt"), nb::arg("w_q"), nb::arg("w_scale").none(),
        nb::arg("w_zero").none(), nb::arg("w_group"), nb::arg("w_gscale"), nb::arg("cols"), nb::arg("bias").none(),
        nb::arg("y"), nb::arg("act_int8") = false, "y[T,N] = x W^T + b, W dequantised in-kernel, fp32 math, on the pool. GIL released.");
  m.def("rms_norm", &rms_norm, nb::arg("x"), nb::arg("w"), nb::arg("eps"), nb::arg("y"),
        "y = w * dtype(x * rsqrt(mean(x^2) + eps)) per row of D, fp32 math, x/w/y of one dtype. GIL released.");
  m.def("decode_attention", &decode_attention, nb::arg("q"), nb::arg("k_pool"), nb::arg("v_pool"), nb::arg("page_table"),
        nb::arg("ctx_lens"), nb::arg("scale"), nb::arg("window"), nb::arg("sinks").none(), nb::arg("o"),
        nb::arg("split_keys") = 0,
        "o[B,N,Dv] = attention of one query per sequence over its paged keys/values, fp32 math, on the pool. GIL released.");
  m.def("route_topk", &route_topk, nb::arg("logits"), nb::arg("k"), nb::arg("kind"), nb::arg("renorm"), nb::arg("base"),
        nb::arg("tok"), nb::arg("eid"), nb::arg("gate"),
        "Top-k routes of T tokens from fp32 logits [T, E] (softmax or top-k softmax), as flat tok/eid/gate lists. GIL released.");
  m.def("rope", &rope, nb::arg("x"), nb::arg("cos"), nb::arg("sin"), nb::arg("interleaved"), nb::arg("y"),
        "y = x with its first R dims rotated (NeoX or interleaved pairs, output in halves), fp32 math. GIL released.");
  m.def("format_names", [] {
    std::vector<std::string> names;
    for (int i = 0; i < static_cast<int>(ft::Fmt::COUNT); ++i) names.emplace_back(ft::fmt_name(static_cast<ft::Fmt>(i)));
    return names;
  }, "The weight formats' names in the order of their codes (cpu/formats.h: Fmt); ft_kernels.FORMATS is built from it.");
  m.def("active_isa", &isa, "The CPU instruction set the kernels use (FT_CPU_ISA forces one).");
  m.def("to_x16", [](Arr q, int64_t cols, int fmt_i) {
    expect(fmt_i >= 0 && fmt_i < static_cast<int>(ft::Fmt::COUNT) && ft::is_x16(static_cast<ft::Fmt>(fmt_i)),
           "format code " + std::to_string(fmt_i) + " is not a K-quant X16 format (q4_k_x16, q5_k_x16, q6_k_x16, q3_k_x16)");
    const ft::Fmt f = static_cast<ft::Fmt>(fmt_i);
    const std::string name = ft::fmt_name(f);
    const int64_t bb = ft::kquant_block_bytes(f);
    expect(q.ndim() == 3 && is_dtype(q, nb::dlpack::dtype_code::UInt, 8), "q must be uint8 [N, rows, row bytes], got " + shape_of(q));
    const int64_t n = q.shape(0), rows = q.shape(1), rb = q.shape(2);
    expect(rows % 16 == 0 && cols > 0 && cols % ft::kQK == 0 && rb >= cols / ft::kQK * bb,
           name + " needs rows % 16 == 0 and whole super-blocks of 256 columns in rows of >= cols / 256 * " +
               std::to_string(bb) + " bytes, got " + shape_of(q) + " for " + std::to_string(cols) + " columns");
    uint8_t* p = static_cast<uint8_t*>(q.data());
    nb::gil_scoped_release release;
    ft::to_x16(f, p, n, rows, cols, rb);
  }, nb::arg("q"), nb::arg("cols"), nb::arg("fmt"),
        "Q4_K / Q5_K / Q6_K / Q3_K blocks q [N, rows, row bytes] -> the X16 format of code fmt in place (cpu/formats.h), on the pool. GIL released.");
  m.def("nib_to_x16", [](Arr q, Arr scale, int64_t cols) {
    const bool f32 = scale.dtype() == nb::dtype<float>();
    expect(q.ndim() == 3 && is_dtype(q, nb::dlpack::dtype_code::UInt, 8) && scale.ndim() == 3 &&
               (f32 || is_dtype(scale, nb::dlpack::dtype_code::UInt, 8)),
           "q must be uint8 [N, rows, cols / 2] and scale uint8 or float32 [N, rows, groups], got " + shape_of(q) +
               " and " + shape_of(scale));
    const int64_t n = q.shape(0), rows = q.shape(1), ns = scale.shape(2);
    expect(rows % 16 == 0 && cols > 0 && cols % 32 == 0 && int64_t(q.shape(2)) == cols / 2 && ns > 0 &&
               int64_t(scale.shape(0)) == n && int64_t(scale.shape(1)) == rows,
           "the X16 4-bit formats need rows % 16 == 0, cols % 32 == 0, q [N, rows, cols / 2] and scale [N, rows, "
           "groups], got " + shape_of(q) + " and " + shape_of(scale) + " for " + std::to_string(cols) + " columns");
    uint8_t* p = static_cast<uint8_t*>(q.data());
    uint8_t* s = static_cast<uint8_t*>(scale.data());
    nb::gil_scoped_release release;
    ft::nib_to_x16(p, s, n, rows, cols, ns, f32 ? 4 : 1);
  }, nb::arg("q"), nb::arg("scale"), nb::arg("cols"),
        "MXFP4 / INT4_SYM codes q [N, rows, cols / 2] and their scales [N, rows, groups] (uint8 e8m0 or float32; contiguous) -> MXFP4_X16 / INT4_SYM_X16 in place (cpu/formats.h), on the pool. GIL released.");
  m.def("split_blocks", [](Arr blocks, int64_t head_bytes, bool nibbles, Arr q, Arr head) {
    const bool u8 = is_dtype(blocks, nb::dlpack::dtype_code::UInt, 8) && is_dtype(q, nb::dlpack::dtype_code::UInt, 8) &&
                    is_dtype(head, nb::dlpack::dtype_code::UInt, 8);
    expect(u8 && blocks.ndim() == 2 && q.ndim() == 2 && head.ndim() == 2,
           "blocks, q and head must be uint8 [n, bytes], got " + shape_of(blocks) + ", " + shape_of(q) + ", " + shape_of(head));
    const int64_t n = blocks.shape(0), bb = blocks.shape(1);
    expect(head_bytes >= 0 && head_bytes < bb && (!nibbles || bb - head_bytes == 16),
           "head_bytes must leave the block's codes (16 bytes where nibbles), got " + std::to_string(head_bytes) +
               " of " + std::to_string(bb));
    expect(int64_t(q.shape(0)) == n && int64_t(q.shape(1)) == bb - head_bytes && int64_t(head.shape(0)) == n &&
               int64_t(head.shape(1)) == head_bytes,
           "q must be [n, block bytes - head_bytes] and head [n, head_bytes], got " + shape_of(q) + " and " + shape_of(head));
    const uint8_t* s = static_cast<const uint8_t*>(blocks.data());
    uint8_t *d = static_cast<uint8_t*>(q.data()), *h = static_cast<uint8_t*>(head.data());
    nb::gil_scoped_release release;
    ft::split_blocks(s, n, bb, head_bytes, nibbles, d, h);
  }, nb::arg("blocks"), nb::arg("head_bytes"), nb::arg("nibbles"), nb::arg("q"), nb::arg("head"),
        "GGML 32-element blocks [n, block bytes] -> their heads [n, head_bytes] and codes [n, rest] (4-bit codes as the kernels' pairs where nibbles), on the pool (cpu/repack.h). GIL released.");
  m.def("int8_to_x16", [](Arr q, Arr scale, int64_t cols) {
    expect(q.ndim() == 3 && is_dtype(q, nb::dlpack::dtype_code::UInt, 8) && scale.ndim() == 3 &&
               scale.dtype() == nb::dtype<float>(),
           "q must be uint8 [N, rows, cols] and scale float32 [N, rows, groups], got " + shape_of(q) + " and " +
               shape_of(scale));
    const int64_t n = q.shape(0), rows = q.shape(1), ns = scale.shape(2);
    expect(rows % 16 == 0 && cols > 0 && cols % 32 == 0 && int64_t(q.shape(2)) == cols && ns > 0 &&
               int64_t(scale.shape(0)) == n && int64_t(scale.shape(1)) == rows,
           "int8_sym_x16 / fp8_e4m3_x16 need rows % 16 == 0, cols % 32 == 0, q [N, rows, cols] and scale [N, rows, "
           "groups], got " +
               shape_of(q) + " and " + shape_of(scale) + " for " + std::to_string(cols) + " columns");
    uint8_t* p = static_cast<uint8_t*>(q.data());
    float* s = static_cast<float*>(scale.data());
    nb::gil_scoped_release release;
    ft::int8_to_x16(p, s, n, rows, cols, ns);
  }, nb::arg("q"), nb::arg("scale"), nb::arg("cols"),
        "INT8_SYM or FP8_E4M3 bytes q [N, rows, cols] and float32 scales [N, rows, groups] (contiguous) -> INT8_SYM_X16 / FP8_E4M3_X16 in place (cpu/formats.h), on the pool. GIL released.");
  m.def("int8_simd", [](int fmt_i) {
    expect(fmt_i >= 0 && fmt_i < static_cast<int>(ft::Fmt::COUNT), "format code " + std::to_string(fmt_i) + " is unknown");
    isa();  // a bad FT_CPU_ISA is a ValueError here too
    return ft::rows_q8_kernel(static_cast<ft::Fmt>(fmt_i)) != ft::rows_q8_scalar;
  }, nb::arg("fmt"), "Whether the int8-activation kernel of format code fmt is a SIMD one on the active ISA (not the scalar twin).");
  m.def("bf16_simd", [](int fmt_i) {
    expect(fmt_i >= 0 && fmt_i < static_cast<int>(ft::Fmt::COUNT), "format code " + std::to_string(fmt_i) + " is unknown");
    isa();
    ft::WeightMat w{};
    w.fmt = static_cast<ft::Fmt>(fmt_i);
    w.group = 32;
    return ft::rows_bf16_kernel(w) != nullptr;
  }, nb::arg("fmt"), "Whether bf16 activations meet weights of format code fmt in a bf16-activation kernel on the active ISA (not widened to fp32).");
  m.def("bf16_tiles", [](int fmt_i, int64_t group) {
    expect(fmt_i >= 0 && fmt_i < static_cast<int>(ft::Fmt::COUNT), "format code " + std::to_string(fmt_i) + " is unknown");
    isa();
    ft::WeightMat w{};
    w.fmt = static_cast<ft::Fmt>(fmt_i);
    w.group = group;
    return ft::rows_tile_kernel(w) != nullptr;
  }, nb::arg("fmt"), nb::arg("group"), "Whether prefill-sized products of bf16 activations with weights of format code fmt (INT4: groups of group columns) run on the AMX tile kernels here.");
  m.def("bf16_i16", [](int fmt_i, int64_t cols, int64_t group) {
    expect(fmt_i >= 0 && fmt_i < static_cast<int>(ft::Fmt::COUNT), "format code " + std::to_string(fmt_i) + " is unknown");
    isa();
    ft::WeightMat w{};
    w.fmt = static_cast<ft::Fmt>(fmt_i);
    w.group = group;
    w.cols = cols;
    return ft::rows_bf16_kernel(w) == nullptr && ft::rows_q16_kernel(w) != nullptr;
  }, nb::arg("fmt"), nb::arg("cols"), nb::arg("group"), "Whether bf16 activations meet weights of format code fmt ([N, cols], INT4 groups of group columns) as 16-bit blocks (cpu/q8.h: Q16Act) on the active ISA.");
  m.def("x16_prefetch", [] {
    ft::check_x16_prefetch();
    return ft::x16_prefetch_nta() ? "nta" : "l2";
  }, "How the AVX-512 X16 kernels prefetch their weights: \"nta\" (non-temporal into L1: Zen 5) or \"l2\" (FT_X16_PREFETCH forces one).");
  m.def("num_threads", &ft::ThreadPool::num_threads, "Threads of the kernel pool (FT_NUM_THREADS, else physical cores).");
  m.def("set_spin_us", &ft::ThreadPool::set_spin_us, nb::arg("us"),
        "Idle pool workers spin this many microseconds before sleeping (0: sleep at once; FT_SPIN_US overrides).");
  m.def("set_num_threads", [](int n) {
    expect(n >= 1, "set_num_threads needs n >= 1");
    ft::ThreadPool::set_num_threads(n);
  }, nb::arg("n"), "Resize the kernel thread pool (not while kernels run).");
}
