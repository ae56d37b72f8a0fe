#include "cpu/gdn_decode.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/threadpool.h"

namespace ft {

void gdn_decode(const GdnDecode& p) {
  std::vector<bool> seen(p.N, false);
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t s = p.slots[b];
    if (s < 0 || s >= p.N || seen[s])
      throw std::invalid_argument("gdn_decode: slots[" + std::to_string(b) + "] = " + std::to_string(s) +
                                  (s >= 0 && s < p.N ? " is repeated" : " is outside [0, " + std::to_string(p.N) + ")"));
    seen[s] = true;
  }
  const GdnHeadFn head = gdn_head_kernel();
  const int64_t scratch = 2 * p.Dk + 3 * p.Dv;
  ThreadPool::get().run(p.B * p.Hv, [&](int64_t i) {
    thread_local std::vector<float> buf;
    if (static_cast<int64_t>(buf.size()) < scratch) buf.resize(scratch);
    head(p, i / p.Hv, i % p.Hv, buf.data());
  });
  // The conv windows move on by one input once every head has read them.
  const int64_t C = 2 * p.Hk * p.Dk + p.Hv * p.Dv, K1 = p.Kc - 1, P = C + p.Hv * p.Dv + 2 * p.Hv;
  const size_t es = p.bf16 ? 2 : 4;
  for (int64_t b = 0; b < p.B; ++b) {
    char* st = static_cast<char*>(p.conv_state) + p.slots[b] * C * K1 * es;
    const char* x = static_cast<const char*>(p.proj) + b * P * es;
    for (int64_t c = 0; c < C; ++c) {
      char* w = st + c * K1 * es;
      if (K1 > 1) std::memmove(w, w + es, (K1 - 1) * es);
      if (K1 > 0) std::memcpy(w + (K1 - 1) * es, x + c * es, es);
    }
  }
}

}  // namespace ft
