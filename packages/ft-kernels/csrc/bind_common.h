// Argument checks shared by the nanobind files: each names the argument it refuses. Header-only, internal.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <optional>
#include <string>

#include "cpu/formats.h"
#include "cpu/moe_ffn.h"

namespace nb = nanobind;
using Arr = nb::ndarray<nb::device::cpu, nb::c_contig>;
using OptArr = std::optional<Arr>;

namespace ft_bind {
inline void expect(bool ok, const std::string& msg) {
  if (!ok) throw nb::value_error(msg.c_str());
}

inline std::string shape_of(const Arr& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

inline bool is_dtype(const Arr& a, nb::dlpack::dtype_code code, int bits) {
  return a.dtype().code == static_cast<uint8_t>(code) && a.dtype().bits == bits;
}

inline int64_t row_bytes(ft::Fmt f, int64_t cols) {
  switch (f) {
    case ft::Fmt::BF16:
    case ft::Fmt::F16: return cols * 2;
    case ft::Fmt::FP8_E4M3:
    case ft::Fmt::INT8_SYM:
    case ft::Fmt::INT8_SYM_X16:
    case ft::Fmt::FP8_E4M3_X16: return cols;
    case ft::Fmt::Q4_K:
    case ft::Fmt::Q5_K:
    case ft::Fmt::Q6_K:
    case ft::Fmt::Q3_K:
    case ft::Fmt::Q2_K:
    case ft::Fmt::Q4_K_X16:
    case ft::Fmt::Q5_K_X16:
    case ft::Fmt::Q6_K_X16:
    case ft::Fmt::Q3_K_X16: return cols / ft::kQK * ft::kquant_block_bytes(f);
    default: return cols / 2;
  }
}

// One expert bank argument set (name: "w13" or "w2") -> ExpertBankRef, checked.
inline ft::ExpertBankRef bank(const std::string& name, int fmt_i, const Arr& q, const OptArr& scale, const OptArr& zero,
                       int group, float gscale, int64_t cols, const OptArr& bias) {
  expect(fmt_i >= 0 && fmt_i < static_cast<int>(ft::Fmt::COUNT), name + "_fmt=" + std::to_string(fmt_i) + " is unknown");
  ft::Fmt fmt = static_cast<ft::Fmt>(fmt_i);
  expect(q.ndim() == 3, name + "_q must be [N, rows, row bytes], got " + shape_of(q));
  int64_t N = q.shape(0), rows = q.shape(1);
  int64_t rb = q.shape(2) * (q.dtype().bits / 8);
  expect(ft::kquant_block_bytes(fmt) == 0 || cols % ft::kQK == 0,
         name + ": " + ft::fmt_name(fmt) + " needs columns in whole super-blocks of 256, got " + std::to_string(cols));
  // K-quant rows may be padded at the end up to the widest K-quant's bytes (mixed banks: experts/bank.py);
  // the kernels read a row's blocks only.
  const bool padded_ok = ft::kquant_block_bytes(fmt) && rb > row_bytes(fmt, cols) &&
                         rb <= cols / ft::kQK * ft::kquant_block_bytes(ft::Fmt::Q6_K);
  expect(rb == row_bytes(fmt, cols) || padded_ok,
         name + "_q rows hold " + std::to_string(rb) + " bytes; " + ft::fmt_name(fmt) + " with " + std::to_string(cols) +
             " columns needs " + std::to_string(row_bytes(fmt, cols)));
  ft::ExpertBankRef b;
  b.n_experts = N;
  b.q_expert_bytes = rows * rb;
  ft::WeightMat& m = b.mat;
  m.fmt = fmt;
  m.rows = rows;
  m.cols = cols;
  m.q = static_cast<const uint8_t*>(q.data());
  m.q_stride = rb;
  m.scale = nullptr;
  m.zero = nullptr;
  m.scale_stride = 0;
  m.group = fmt == ft::Fmt::MXFP4 || fmt == ft::Fmt::MXFP4_X16 ? 32 : fmt == ft::Fmt::NVFP4 ? 16 : group;
  m.global_scale = gscale;
  // The K-quant blocks carry their own scales.
  bool needs_scale = fmt != ft::Fmt::BF16 && fmt != ft::Fmt::F16 && ft::kquant_block_bytes(fmt) == 0;
  if (needs_scale) {
    expect(scale.has_value(), name + "_scale is required for " + ft::fmt_name(fmt));
    expect(m.group > 0, name + "_group must be > 0 for " + std::string(ft::fmt_name(fmt)));
    const Arr& s = *scale;
    int64_t ns = (cols + m.group - 1) / m.group;
    bool byte_scale = fmt == ft::Fmt::MXFP4 || fmt == ft::Fmt::MXFP4_X16 || fmt == ft::Fmt::NVFP4;
    // the group-scaled X16 formats take f16 scales too (GGUF Q4_0 / Q8_0's own)
    bool f16_ok = fmt == ft::Fmt::INT4_SYM_X16 || fmt == ft::Fmt::INT8_SYM_X16 || fmt == ft::Fmt::FP8_E4M3_X16;
    m.scale_f16 = f16_ok && is_dtype(s, nb::dlpack::dtype_code::Float, 16);
    expect(s.ndim() == 3 && int64_t(s.shape(0)) == N && int64_t(s.shape(1)) == rows && int64_t(s.shape(2)) == ns &&
               (byte_scale ? is_dtype(s, nb::dlpack::dtype_code::UInt, 8) : s.dtype() == nb::dtype<float>() || m.scale_f16),
           name + "_scale must be " + (byte_scale ? "uint8" : f16_ok ? "float32 or float16" : "float32") + " [" +
               std::to_string(N) + ", " + std::to_string(rows) + ", " + std::to_string(ns) + "], got " + shape_of(s));
    m.scale = s.data();
    m.scale_stride = ns;
    b.scale_expert_bytes = rows * ns * (byte_scale ? 1 : m.scale_f16 ? 2 : 4);
    if (fmt == ft::Fmt::INT4_ASYM) {
      expect(zero.has_value() && zero->ndim() == 3 && is_dtype(*zero, nb::dlpack::dtype_code::UInt, 8) &&
                 int64_t(zero->shape(0)) == N && int64_t(zero->shape(1)) == rows && int64_t(zero->shape(2)) == ns,
             name + "_zero must be uint8 [N, rows, ceil(cols/group)] for int4_asym");
      m.zero = static_cast<const uint8_t*>(zero->data());
      b.zero_expert_bytes = rows * ns;
    }
  }
  if (bias) {
    expect(bias->ndim() == 2 && int64_t(bias->shape(0)) == N && int64_t(bias->shape(1)) == rows &&
               bias->dtype() == nb::dtype<float>(),
           name + "_bias must be float32 [" + std::to_string(N) + ", " + std::to_string(rows) + "], got " + shape_of(*bias));
    b.bias = static_cast<const float*>(bias->data());
  }
  return b;
}

}  // namespace ft_bind
