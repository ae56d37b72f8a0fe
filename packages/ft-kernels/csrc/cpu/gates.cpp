#include "cpu/gates.h"

#include "cpu/arch/sigmoid.h"
#include "cpu/formats.h"

namespace ft {

namespace {
template <bool BF16>
inline float rd(const void* p, int64_t i) {
  if constexpr (BF16)
    return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  else
    return static_cast<const float*>(p)[i];
}
template <bool BF16>
inline float rnd(float v) {
  if constexpr (BF16)
    return bf16_to_f32(f32_to_bf16(v));
  else
    return v;
}
template <bool BF16>
inline void wr(void* p, int64_t i, float v) {
  if constexpr (BF16)
    static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
  else
    static_cast<float*>(p)[i] = v;
}

template <bool BF16>
void sigmoid_mul_t(const void* a, const void* g, int64_t T, int64_t C, int64_t gc, void* y) {
  for (int64_t t = 0; t < T; ++t) {
    if (gc == 1) {
      const float s = rnd<BF16>(sigmoid(rd<BF16>(g, t)));
      for (int64_t i = 0; i < C; ++i) wr<BF16>(y, t * C + i, rd<BF16>(a, t * C + i) * s);
    } else {
      for (int64_t i = 0; i < C; ++i)
        wr<BF16>(y, t * C + i, rd<BF16>(a, t * C + i) * rnd<BF16>(sigmoid(rd<BF16>(g, t * C + i))));
    }
  }
}

template <bool BF16>
void silu_mul_t(const void* g, const void* u, int64_t n, void* y) {
  for (int64_t i = 0; i < n; ++i) wr<BF16>(y, i, rnd<BF16>(silu(rd<BF16>(g, i))) * rd<BF16>(u, i));
}
}  // namespace

void sigmoid_mul(const void* a, const void* g, bool bf16, int64_t T, int64_t C, int64_t gc, void* y) {
  bf16 ? sigmoid_mul_t<true>(a, g, T, C, gc, y) : sigmoid_mul_t<false>(a, g, T, C, gc, y);
}

void silu_mul(const void* g, const void* u, bool bf16, int64_t n, void* y) {
  bf16 ? silu_mul_t<true>(g, u, n, y) : silu_mul_t<false>(g, u, n, y);
}

}  // namespace ft
