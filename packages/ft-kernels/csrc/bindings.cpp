// The one nanobind file: argument checks that name the argument, then the Python-free core
// with the GIL released. Tensors arrive by DLPack without copies.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <stdexcept>
#include <string>

#include "cpu/isa.h"
#include "cpu/moe_ffn.h"

namespace nb = nanobind;
using Arr = nb::ndarray<nb::device::cpu, nb::c_contig>;

static bool is_bf16(const Arr& a) {
  return a.dtype().code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && a.dtype().bits == 16;
}

static void expect(bool ok, const std::string& msg) {
  if (!ok) throw nb::value_error(msg.c_str());
}

static std::string shape_of(const Arr& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

static void moe_swiglu_bf16(Arr x, Arr tok, Arr eid, Arr gate, Arr w13, Arr w2, Arr y) {
  expect(x.ndim() == 2 && x.dtype() == nb::dtype<float>(), "x must be float32 [T, H], got " + shape_of(x));
  int64_t T = x.shape(0), H = x.shape(1);
  expect(tok.ndim() == 1 && tok.dtype() == nb::dtype<int32_t>(), "tok must be int32 [R]");
  int64_t R = tok.shape(0);
  expect(eid.ndim() == 1 && eid.dtype() == nb::dtype<int32_t>() && int64_t(eid.shape(0)) == R,
         "eid must be int32 [R] with R=" + std::to_string(R));
  expect(gate.ndim() == 1 && gate.dtype() == nb::dtype<float>() && int64_t(gate.shape(0)) == R,
         "gate must be float32 [R] with R=" + std::to_string(R));
  expect(w13.ndim() == 3 && is_bf16(w13) && int64_t(w13.shape(2)) == H && w13.shape(1) % 2 == 0,
         "w13 must be bfloat16 [N, 2I, H] with H=" + std::to_string(H) + ", got " + shape_of(w13));
  int64_t N = w13.shape(0), I = w13.shape(1) / 2;
  expect(w2.ndim() == 3 && is_bf16(w2) && int64_t(w2.shape(0)) == N && int64_t(w2.shape(1)) == H &&
             int64_t(w2.shape(2)) == I,
         "w2 must be bfloat16 [N, H, I] = [" + std::to_string(N) + ", " + std::to_string(H) + ", " +
             std::to_string(I) + "], got " + shape_of(w2));
  expect(y.ndim() == 2 && y.dtype() == nb::dtype<float>() && int64_t(y.shape(0)) == T && int64_t(y.shape(1)) == H,
         "y must be float32 [T, H] like x, got " + shape_of(y));
  auto* xp = static_cast<const float*>(x.data());
  auto* tp = static_cast<const int32_t*>(tok.data());
  auto* ep = static_cast<const int32_t*>(eid.data());
  auto* gp = static_cast<const float*>(gate.data());
  auto* w13p = static_cast<const uint16_t*>(w13.data());
  auto* w2p = static_cast<const uint16_t*>(w2.data());
  auto* yp = static_cast<float*>(y.data());
  std::string err;
  {
    nb::gil_scoped_release release;
    try {
      ft::moe_swiglu_bf16(xp, T, H, tp, ep, gp, R, w13p, w2p, N, I, yp);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  if (!err.empty()) throw nb::value_error(err.c_str());
}

static std::string isa() {
  try {
    return ft::active_isa();
  } catch (const std::exception& e) {
    throw nb::value_error(e.what());
  }
}

NB_MODULE(_C, m) {
  m.doc() = "ft CPU expert kernels";
  m.def("moe_swiglu_bf16", &moe_swiglu_bf16, nb::arg("x"), nb::arg("tok"), nb::arg("eid"), nb::arg("gate"),
        nb::arg("w13"), nb::arg("w2"), nb::arg("y"),
        "y[T,H] = sum of gate * SwiGLU expert(x) over routes; bf16 banks, fp32 math. GIL released.");
  m.def("active_isa", &isa, "The CPU instruction set the kernels use (FT_CPU_ISA forces one).");
}
