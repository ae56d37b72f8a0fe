// HostBranch (cpu/host_branch.h) as a Python class: built once per step shape from the expert bank's
// weights (as moe_experts takes them) and the step's page-locked buffers (all kept alive by it); run by a
// device's host function (call_address / address: cudaLaunchHostFunc's function and data), by its polling
// thread, or directly (run: the CPU stand-in of a host function).
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bind_common.h"
#include "cpu/host_branch.h"

using namespace ft_bind;

namespace {

// Host memory of either kind: a device's page-locked buffers come as DLPack's CUDA-host device, not CPU.
using HostArr = nb::ndarray<nb::c_contig>;
using OptHostArr = std::optional<HostArr>;

Arr host(const HostArr& a, const char* name) {
  expect(a.device_type() == nb::device::cpu::value || a.device_type() == nb::device::cuda_host::value,
         std::string(name) + " must be in host memory (CPU or page-locked)");
  return Arr(a);
}
OptArr host(const OptHostArr& a, const char* name) { return a ? OptArr(host(*a, name)) : std::nullopt; }

class HostBranchPy {
 public:
  HostBranchPy(int w13_fmt, HostArr w13_q, OptHostArr w13_scale, OptHostArr w13_zero, int w13_group, float w13_gscale,
               OptHostArr w13_bias, int w2_fmt, HostArr w2_q, OptHostArr w2_scale, OptHostArr w2_zero, int w2_group,
               float w2_gscale, OptHostArr w2_bias, int act, float alpha, float limit, bool act_int8,  //
               HostArr route_slot, HostArr counts, HostArr x, HostArr tok, HostArr eid, HostArr gate, HostArr y,
               int64_t experts, HostArr stats)
      : HostBranchPy(w13_fmt, host(w13_q, "w13_q"), host(w13_scale, "w13_scale"), host(w13_zero, "w13_zero"), w13_group,
                     w13_gscale, host(w13_bias, "w13_bias"), w2_fmt, host(w2_q, "w2_q"), host(w2_scale, "w2_scale"),
                     host(w2_zero, "w2_zero"), w2_group, w2_gscale, host(w2_bias, "w2_bias"), act, alpha, limit, act_int8,
                     host(route_slot, "route_slot"), host(counts, "counts"), host(x, "x"), host(tok, "tok"),
                     host(eid, "eid"), host(gate, "gate"), host(y, "y"), experts, host(stats, "stats"), 0) {}

  HostBranchPy(int w13_fmt, Arr w13_q, OptArr w13_scale, OptArr w13_zero, int w13_group, float w13_gscale,
               OptArr w13_bias, int w2_fmt, Arr w2_q, OptArr w2_scale, OptArr w2_zero, int w2_group, float w2_gscale,
               OptArr w2_bias, int act, float alpha, float limit, bool act_int8,  //
               Arr route_slot, Arr counts, Arr x, Arr tok, Arr eid, Arr gate, Arr y, int64_t experts, Arr stats, int) {
    bool xb = is_dtype(x, nb::dlpack::dtype_code::Bfloat, 16);
    expect(x.ndim() == 2 && (x.dtype() == nb::dtype<float>() || xb), "x must be float32 or bfloat16 [T, H], got " + shape_of(x));
    int64_t T = x.shape(0), H = x.shape(1);
    expect(route_slot.ndim() == 1 && route_slot.dtype() == nb::dtype<int64_t>(), "route_slot must be int64 [R]");
    int64_t R = route_slot.shape(0);
    auto routes = [&](const char* name, const Arr& a, nb::dlpack::dtype dt, const char* dts) {
      expect(a.ndim() == 1 && int64_t(a.shape(0)) == R && a.dtype() == dt,
             std::string(name) + " must be " + dts + " [R] with R=" + std::to_string(R) + ", got " + shape_of(a));
    };
    routes("tok", tok, nb::dtype<int64_t>(), "int64");
    routes("eid", eid, nb::dtype<int64_t>(), "int64");
    routes("gate", gate, nb::dtype<float>(), "float32");
    expect(counts.ndim() == 1 && counts.shape(0) == 4 && counts.dtype() == nb::dtype<int32_t>(), "counts must be int32 [4]");
    expect(y.ndim() == 2 && y.dtype() == nb::dtype<float>() && int64_t(y.shape(0)) == T && int64_t(y.shape(1)) == H,
           "y must be float32 [T, H] like x, got " + shape_of(y));
    expect(stats.ndim() == 2 && stats.shape(1) == ft::kStatCols && stats.dtype() == nb::dtype<int64_t>(),
           "stats must be int64 [layers, " + std::to_string(ft::kStatCols) + "], got " + shape_of(stats));
    expect(act == 0 || act == 1, "act must be 0 (swiglu) or 1 (gptoss)");
    ft::MoeArgs w;
    w.w13 = bank("w13", w13_fmt, w13_q, w13_scale, w13_zero, w13_group, w13_gscale, H, w13_bias);
    expect(w.w13.mat.rows % 2 == 0, "w13 must have 2I rows (gate rows, then up rows)");
    w.w2 = bank("w2", w2_fmt, w2_q, w2_scale, w2_zero, w2_group, w2_gscale, w.w13.mat.rows / 2, w2_bias);
    w.act = static_cast<ft::Act>(act), w.alpha = alpha, w.limit = limit, w.act_int8 = act_int8;
    ft::HostBranchIo io;
    io.route_slot = static_cast<const int64_t*>(route_slot.data());
    io.counts = static_cast<const int32_t*>(counts.data());
    io.x = x.data(), io.x_bf16 = xb, io.T = T, io.H = H;
    io.tok = static_cast<const int64_t*>(tok.data());
    io.eid = static_cast<const int64_t*>(eid.data());
    io.gate = static_cast<const float*>(gate.data());
    io.R = R;
    io.y = static_cast<float*>(y.data());
    kept_ = {w13_q, w2_q, route_slot, counts, x, tok, eid, gate, y, stats};
    for (const OptArr* o : {&w13_scale, &w13_zero, &w13_bias, &w2_scale, &w2_zero, &w2_bias})
      if (*o) kept_.push_back(**o);
    b_ = std::make_unique<ft::HostBranch>(w, io, experts, static_cast<int64_t*>(stats.data()), int64_t(stats.shape(0)));
  }

  void run() {
    nb::gil_scoped_release release;
    b_->run();
  }
  std::string error() const { return b_->error(); }
  uintptr_t address() const { return reinterpret_cast<uintptr_t>(b_.get()); }
  static uintptr_t call_address() { return reinterpret_cast<uintptr_t>(&ft_host_branch_call); }
  int64_t runs() const { return b_->runs(); }

  void start_polling(HostArr flag_in, HostArr done_in) {
    Arr flag = host(flag_in, "flag"), done = host(done_in, "done");
    for (const Arr* a : {&flag, &done})
      expect(a->ndim() == 1 && a->shape(0) >= 1 && a->dtype() == nb::dtype<int32_t>(), "flag and done must be int32 [>= 1]");
    polled_ = {flag, done};
    b_->start_polling(static_cast<const int32_t*>(flag.data()), static_cast<int32_t*>(done.data()));
  }
  void stop_polling() {
    nb::gil_scoped_release release;
    b_->stop_polling();
  }

 private:
  std::unique_ptr<ft::HostBranch> b_;
  std::vector<Arr> kept_, polled_;
};

}  // namespace

void bind_host_branch(nb::module_& m) {
  nb::class_<HostBranchPy>(m, "HostBranch",
                           "The CPU share of a device's MoE layer step, run from page-locked buffers outside Python "
                           "(cpu/host_branch.h)")
      .def(nb::init<int, HostArr, OptHostArr, OptHostArr, int, float, OptHostArr, int, HostArr, OptHostArr, OptHostArr, int,
                    float, OptHostArr, int, float, float, bool, HostArr, HostArr, HostArr, HostArr, HostArr, HostArr, HostArr,
                    int64_t, HostArr>(),
           nb::arg("w13_fmt"), nb::arg("w13_q"), nb::arg("w13_scale").none(), nb::arg("w13_zero").none(),
           nb::arg("w13_group"), nb::arg("w13_gscale"), nb::arg("w13_bias").none(), nb::arg("w2_fmt"), nb::arg("w2_q"),
           nb::arg("w2_scale").none(), nb::arg("w2_zero").none(), nb::arg("w2_group"), nb::arg("w2_gscale"),
           nb::arg("w2_bias").none(), nb::arg("act"), nb::arg("alpha"), nb::arg("limit"), nb::arg("act_int8"),
           nb::arg("route_slot"), nb::arg("counts"), nb::arg("x"), nb::arg("tok"), nb::arg("eid"), nb::arg("gate"),
           nb::arg("y"), nb::arg("experts"), nb::arg("stats"))
      .def("run", &HostBranchPy::run)
      .def("error", &HostBranchPy::error)
      .def("address", &HostBranchPy::address)
      .def_static("call_address", &HostBranchPy::call_address)
      .def("runs", &HostBranchPy::runs)
      .def("start_polling", &HostBranchPy::start_polling, nb::arg("flag"), nb::arg("done"))
      .def("stop_polling", &HostBranchPy::stop_polling);
}
