#include "cpu/attn_prefill.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/threadpool.h"

namespace ft {

void prefill_attention(const PrefillAttn& a) {
  // Validate every length and page a task will read before any runs (a bad table is an error, never a wild read).
  int64_t total = 0;
  for (int64_t b = 0; b < a.B; ++b) {
    const int64_t ctx = a.ctx[b], ql = a.q_lens[b];
    if (ctx < 0 || ctx > a.pmax * a.S)
      throw std::invalid_argument("prefill_attention: ctx_lens[" + std::to_string(b) + "] = " + std::to_string(ctx) +
                                  " is outside [0, " + std::to_string(a.pmax * a.S) + "] (pages x page size)");
    if (ql < 0 || ql > ctx)
      throw std::invalid_argument("prefill_attention: q_lens[" + std::to_string(b) + "] = " + std::to_string(ql) +
                                  " is outside [0, ctx_lens[" + std::to_string(b) + "] = " + std::to_string(ctx) + "]");
    total += ql;
    for (int64_t p = 0; p < (ctx + a.S - 1) / a.S; ++p) {
      const int64_t page = a.page_table[b * a.pmax + p];
      if (page < 0 || page >= a.P)
        throw std::invalid_argument("prefill_attention: page_table[" + std::to_string(b) + ", " + std::to_string(p) +
                                    "] = " + std::to_string(page) + " is outside [0, " + std::to_string(a.P) + ")");
    }
  }
  if (total != a.T)
    throw std::invalid_argument("prefill_attention: q_lens sum to " + std::to_string(total) + ", q has T = " +
                                std::to_string(a.T) + " rows");
  // Tasks: (sequence, KV head, block of about kPrefillRows rows). A thread runs neighbouring tasks first: those of
  // one KV head of one sequence, so its keys and values stay in cache from task to task; latest queries first.
  const int64_t G = a.N / a.K, per = std::max<int64_t>(1, kPrefillRows / G);
  std::vector<PrefillTask> tasks;
  for (int64_t b = 0, t0 = 0; b < a.B; t0 += a.q_lens[b], ++b)
    for (int64_t kh = 0; kh < a.K; ++kh)
      for (int64_t i1 = a.q_lens[b]; i1 > 0; i1 -= per) tasks.push_back({b, kh, std::max<int64_t>(0, i1 - per), i1, t0});
  const AttnPrefillFn fn = attn_prefill_kernel();
  ThreadPool::get().run(static_cast<int64_t>(tasks.size()), [&](int64_t i) { fn(a, tasks[i]); });
}

}  // namespace ft
