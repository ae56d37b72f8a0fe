#include "cpu/gates.h"

#include "cpu/act.h"
#include "cpu/arch/sigmoid.h"

namespace ft {

namespace {

template <bool BF16>
void sigmoid_mul_t(const void* a, const void* g, int64_t T, int64_t C, int64_t gc, void* y) {
  for (int64_t t = 0; t < T; ++t) {
    if (gc == 1) {
      const float s = act_round<BF16>(sigmoid(act_load<BF16>(g, t)));
      for (int64_t i = 0; i < C; ++i) act_store<BF16>(y, t * C + i, act_load<BF16>(a, t * C + i) * s);
    } else {
      for (int64_t i = 0; i < C; ++i)
        act_store<BF16>(y, t * C + i, act_load<BF16>(a, t * C + i) * act_round<BF16>(sigmoid(act_load<BF16>(g, t * C + i))));
    }
  }
}

template <bool BF16>
void silu_mul_t(const void* g, const void* u, int64_t n, void* y) {
  for (int64_t i = 0; i < n; ++i) act_store<BF16>(y, i, act_round<BF16>(silu(act_load<BF16>(g, i))) * act_load<BF16>(u, i));
}
}  // namespace

void sigmoid_mul(const void* a, const void* g, bool bf16, int64_t T, int64_t C, int64_t gc, void* y) {
  bf16 ? sigmoid_mul_t<true>(a, g, T, C, gc, y) : sigmoid_mul_t<false>(a, g, T, C, gc, y);
}

void silu_mul(const void* g, const void* u, bool bf16, int64_t n, void* y) {
  bf16 ? silu_mul_t<true>(g, u, n, y) : silu_mul_t<false>(g, u, n, y);
}

}  // namespace ft
