#include "cpu/attn_decode.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

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
  // Spans: each sequence's context split in up to `want` spans of >= split_keys keys when the sequences alone
  // would leave threads idle; a task is one span of one sequence for all its KV heads (every head's part of it).
  ThreadPool& pool = ThreadPool::get();
  // default: a span's work over every head about that of 256 keys of one head
  const int64_t min_keys = a.split_keys > 0 ? a.split_keys : std::max<int64_t>(32, 256 / a.K);
  const int64_t want = std::max<int64_t>(1, (2 * pool.size() + a.B - 1) / a.B);
  struct Span { int64_t b, lo, hi; };
  std::vector<Span> spans;
  std::vector<int64_t> first(a.B * a.K + 1, 0);  // parts of (sequence, KV head) pair i: first[i] .. first[i + 1] - 1
  std::vector<int64_t> tasks;                   // the part of KV head 0 of each span (head kh's: + kh * spans)
  for (int64_t b = 0; b < a.B; ++b) {
    const int64_t ctx = a.ctx[b], lo = a.window > 0 ? std::max<int64_t>(0, ctx - a.window) : 0;
    const int64_t n = std::max<int64_t>(1, std::min(want, (ctx - lo) / min_keys));
    for (int64_t s = 0; s < n; ++s) {
      tasks.push_back(first[b * a.K] + s);
      spans.push_back({b, lo + (ctx - lo) * s / n, lo + (ctx - lo) * (s + 1) / n});
    }
    for (int64_t kh = 0; kh < a.K; ++kh) first[b * a.K + kh + 1] = first[b * a.K + kh] + n;
  }
  const int64_t G = a.N / a.K, Dv = a.Dv, stride = G * (Dv + 2);
  std::vector<float> parts(first[a.B * a.K] * stride);
  const AttnSpanFn span = attn_span_kernel(a);
  pool.run(static_cast<int64_t>(tasks.size()), [&](int64_t i) {
    const Span& s = spans[i];
    const int64_t n = first[s.b * a.K + 1] - first[s.b * a.K];
    span(a, s.b, s.lo, s.hi, parts.data() + tasks[i] * stride, n * stride);
  });
  // Merge: with M the largest span max (and the sink, one more value-less logit), o = sum_s e^(m_s - M) acc_s /
  // (sum_s e^(m_s - M) l_s + e^(sink - M)); every exponent <= 0.
  for (int64_t i = 0; i < a.B * a.K; ++i) {
    const int64_t b = i / a.K, kh = i % a.K;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t n = kh * G + g;
      float top = a.sinks ? a.sinks[n] : -INFINITY;
      for (int64_t s = first[i]; s < first[i + 1]; ++s) top = std::max(top, parts[s * stride + G * Dv + g]);
      float* out = a.o + (b * a.N + n) * Dv;
      std::fill(out, out + Dv, 0.f);
      float den = a.sinks ? std::exp(a.sinks[n] - top) : 0.f;
      for (int64_t s = first[i]; s < first[i + 1]; ++s) {
        const float* p = parts.data() + s * stride;
        const float c = std::exp(p[G * Dv + g] - top);
        den += c * p[G * Dv + G + g];
        for (int64_t d = 0; d < Dv; ++d) out[d] += c * p[g * Dv + d];
      }
      for (int64_t d = 0; d < Dv; ++d) out[d] /= den;
    }
  }
}

}  // namespace ft
