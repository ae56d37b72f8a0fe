// Elements of an activation tensor held in bf16 (BF16) or fp32, as fp32: load, round to the dtype, store
// (round to nearest even, formats.h). In an anonymous namespace: files built for different ISAs each keep
// their own copy. Python-free.
#pragma once
#include <cstdint>

#include "cpu/formats.h"

namespace ft {
namespace {

template <bool BF16>
inline float act_load(const void* p, int64_t i) {
  if constexpr (BF16)
    return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  else
    return static_cast<const float*>(p)[i];
}

template <bool BF16>
inline float act_round(float x) {
  if constexpr (BF16)
    return bf16_to_f32(f32_to_bf16(x));
  else
    return x;
}

template <bool BF16>
inline void act_store(void* p, int64_t i, float v) {
  if constexpr (BF16)
    static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
  else
    static_cast<float*>(p)[i] = v;
}

}  // namespace
}  // namespace ft
