// sigmoid and SiLU in fp32, branch-free over attn_common.h's exp_neg (the compiler vectorises loops of them),
// for the decode kernels' gates (gdn_common.h, cpu/gates.cpp). Internal; in an anonymous namespace.
#pragma once
#include <cmath>

#include "cpu/arch/attn_common.h"  // exp_neg

namespace ft {
namespace {

// With e = e^-|x| in (0, 1]: 1 / (1 + e) for x >= 0, e / (1 + e) below (no overflow). Relative error below
// 20 u: exp_neg's 16 u, a division and a product.
inline float sigmoid(float x) {
  const float e = exp_neg(-std::fabs(x)), s = 1.f / (1.f + e);
  return x >= 0.f ? s : e * s;
}

inline float silu(float x) { return x * sigmoid(x); }

}  // namespace
}  // namespace ft
