#include "cpu/gdn_prefill.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/act.h"
#include "cpu/dispatch.h"
#include "cpu/threadpool.h"

namespace ft {

namespace {

// Token t's key head kh: q and k from y as fp32, each times its l2 factor (q's with Dk^-1/2), into qk.
void normalise(const GdnPrefill& p, int64_t t, int64_t kh, float* qk) {
  const int64_t Dk = p.Dk;
  float* q = qk + (t * p.Hk + kh) * 2 * Dk;
  float* k = q + Dk;
  const auto load = [&](int64_t i) { return p.bf16 ? act_load<true>(p.y, i) : act_load<false>(p.y, i); };
  for (int64_t i = 0; i < Dk; ++i) {
    const int64_t r = t * p.ys + kh * Dk + i;
    q[i] = load(r), k[i] = load(r + p.Hk * Dk);
  }
  double sq = 0, sk = 0;
  for (int64_t i = 0; i < Dk; ++i) sq += double(q[i]) * q[i], sk += double(k[i]) * k[i];
  const float rq = float(1.0 / std::sqrt(double(Dk)) / std::sqrt(sq + 1e-6)), rk = float(1.0 / std::sqrt(sk + 1e-6));
  for (int64_t i = 0; i < Dk; ++i) q[i] *= rq, k[i] *= rk;
}

}  // namespace

void gdn_prefill(const GdnPrefill& p) {
  if (p.L == 0) return;
  thread_local std::vector<float> qk;  // the caller's thread: reused across calls (a 512-token chunk: ~8 MiB)
  const size_t n = size_t(p.L) * p.Hk * 2 * p.Dk;
  if (qk.size() < n) qk.resize(n);
  float* QK = qk.data();
  ThreadPool& pool = ThreadPool::get();
  pool.run(p.L * p.Hk, [&](int64_t i) { normalise(p, i / p.Hk, i % p.Hk, QK); });
  const GdnRuleFn rule = gdn_rule_kernel();
  const int64_t blocks = (p.Dv + kGdnBlock - 1) / kGdnBlock;
  pool.run(p.Hv * blocks, [&](int64_t i) {
    thread_local std::vector<float> buf;
    if (static_cast<int64_t>(buf.size()) < p.Dk * kGdnBlock) buf.resize(p.Dk * kGdnBlock);
    const int64_t h = i / blocks, j0 = (i % blocks) * kGdnBlock;
    rule(p, QK, h, j0, std::min(kGdnBlock, p.Dv - j0), buf.data());
  });
}

}  // namespace ft
