#include "cpu/attn_decode.h"

#include <stdexcept>
#include <string>

#include "cpu/dispatch.h"
#include "cpu/threadpool.h"

namespace ft {

void decode_attention(const DecodeAttn& a) {
  // Validate every page a task will read before any runs (a bad table is an error, never a wild read).
  for (int64_t b = 0; b < a.B; ++b) {
    const int64_t ctx = a.ctx[b];
    if (ctx < 1 || ctx > a.pmax * a.S)
      throw std::invalid_argument("decode_attention: ctx_lens[" + std::to_string(b) + "] = " + std::to_string(ctx) +
                                  " is outside [1, " + std::to_string(a.pmax * a.S) + "] (pages x page size)");
    for (int64_t p = 0; p < (ctx + a.S - 1) / a.S; ++p) {
      const int64_t page = a.page_table[b * a.pmax + p];
      if (page < 0 || page >= a.P)
        throw std::invalid_argument("decode_attention: page_table[" + std::to_string(b) + ", " + std::to_string(p) +
                                    "] = " + std::to_string(page) + " is outside [0, " + std::to_string(a.P) + ")");
    }
  }
  const AttnHeadFn head = attn_head_kernel();
  ThreadPool::get().run(a.B * a.K, [&](int64_t i) { head(a, i / a.K, i % a.K); });
}

}  // namespace ft
