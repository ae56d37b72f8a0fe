#include "cpu/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/threadpool.h"

namespace ft {

namespace {

struct Group {
  int64_t e, start, k;  // expert, first position in the expert-sorted route order, routes
};

// Rows per task: keep one task's weight rows within ~256 KiB (L2) so prefill token blocks reuse them.
int64_t row_block(const WeightMat& m) {
  int64_t row_bytes = std::max<int64_t>(m.q_stride, 1);
  return std::clamp<int64_t>((256 << 10) / row_bytes, 8, 64);
}

void check(const MoeArgs& a) {
  auto bad = [](const std::string& s) { throw std::invalid_argument(s); };
  for (const auto* b : {&a.w13, &a.w2})
    if (const char* why = check_mat(b->mat)) bad(std::string(b == &a.w13 ? "w13: " : "w2: ") + why);
  if (a.w13.mat.cols != a.H) bad("w13 has " + std::to_string(a.w13.mat.cols) + " columns, x has H=" + std::to_string(a.H));
  if (a.w13.mat.rows % 2) bad("w13 must have 2I rows (gate then up)");
  if (a.w2.mat.rows != a.H || a.w2.mat.cols != a.w13.mat.rows / 2)
    bad("w2 must be [H, I] = [" + std::to_string(a.H) + ", " + std::to_string(a.w13.mat.rows / 2) + "]");
  if (a.w2.n_experts != a.w13.n_experts) bad("w13 and w2 hold different numbers of experts");
  for (int64_t r = 0; r < a.R; ++r) {
    if (a.tok[r] < 0 || a.tok[r] >= a.T)
      bad("tok[" + std::to_string(r) + "]=" + std::to_string(a.tok[r]) + " is outside [0, T=" + std::to_string(a.T) + ")");
    if (a.eid[r] < 0 || a.eid[r] >= a.w13.n_experts)
      bad("eid[" + std::to_string(r) + "]=" + std::to_string(a.eid[r]) + " is outside [0, N=" +
          std::to_string(a.w13.n_experts) + ") experts in the bank");
  }
}

}  // namespace

void moe_experts(const MoeArgs& a) {
  check(a);
  const int64_t H = a.H, I = a.w13.mat.rows / 2, R = a.R;
  std::memset(a.y, 0, sizeof(float) * a.T * H);
  if (R == 0) return;
  RowsFn k13 = rows_kernel(a.w13.mat.fmt), k2 = rows_kernel(a.w2.mat.fmt);
  ThreadPool& pool = ThreadPool::get();

  // Routes sorted by expert (stable: duplicates keep their order); x gathered in that order.
  std::vector<int64_t> order(R);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return a.eid[p] < a.eid[q]; });
  std::vector<Group> groups;
  for (int64_t s = 0; s < R;) {
    int64_t e = a.eid[order[s]], k = 0;
    while (s + k < R && a.eid[order[s + k]] == e) ++k;
    groups.push_back({e, s, k});
    s += k;
  }
  // Calls that read little (tiny models, a few experts) run on the calling thread: waking the pool
  // would cost more than the work.
  const int64_t bytes = static_cast<int64_t>(groups.size()) *
                        (a.w13.q_expert_bytes + a.w13.scale_expert_bytes + a.w2.q_expert_bytes + a.w2.scale_expert_bytes);
  auto run = [&](int64_t n, const std::function<void(int64_t)>& fn) {
    if (bytes < (1 << 20)) {
      for (int64_t i = 0; i < n; ++i) fn(i);
    } else {
      pool.run(n, fn);
    }
  };
  std::vector<float> xs(R * H), gu(R * 2 * I), h(R * I), out(R * H);
  for (int64_t j = 0; j < R; ++j) {
    int64_t t = a.tok[order[j]];
    if (a.x_bf16) {
      const uint16_t* src = static_cast<const uint16_t*>(a.x) + t * H;
      for (int64_t c = 0; c < H; ++c) xs[j * H + c] = bf16_to_f32(src[c]);
    } else {
      std::memcpy(&xs[j * H], static_cast<const float*>(a.x) + t * H, sizeof(float) * H);
    }
  }

  // One matrix product per group over row blocks: tasks = (group, row block).
  auto gemm = [&](const ExpertBankRef& bank, RowsFn kern, const float* in, int64_t in_ld, float* dst, int64_t dst_ld) {
    const int64_t rows = bank.mat.rows, rb = row_block(bank.mat), nb = (rows + rb - 1) / rb;
    run(static_cast<int64_t>(groups.size()) * nb, [&](int64_t task) {
      const Group& g = groups[task / nb];
      int64_t r0 = (task % nb) * rb, r1 = std::min(rows, r0 + rb);
      kern(bank.expert(g.e), r0, r1, in + g.start * in_ld, g.k, in_ld, dst + g.start * dst_ld + r0, dst_ld);
    });
  };
  gemm(a.w13, k13, xs.data(), H, gu.data(), 2 * I);

  // Activation (+ w13 bias), one task per route.
  run(R, [&](int64_t j) {
    const float* b = a.w13.bias ? a.w13.bias + a.eid[order[j]] * 2 * I : nullptr;
    const float* g = &gu[j * 2 * I];
    float* hj = &h[j * I];
    for (int64_t i = 0; i < I; ++i) {
      float gv = g[i] + (b ? b[i] : 0.f), uv = g[I + i] + (b ? b[I + i] : 0.f);
      if (a.act == Act::SWIGLU) {
        hj[i] = gv / (1.f + std::exp(-gv)) * uv;
      } else {
        gv = std::min(gv, a.limit);
        uv = std::clamp(uv, -a.limit, a.limit);
        hj[i] = (uv + 1.f) * (gv / (1.f + std::exp(-a.alpha * gv)));
      }
    }
  });
  gemm(a.w2, k2, h.data(), I, out.data(), H);

  // Gate-weighted sum (+ w2 bias) into y; tasks own column slices, so no two write the same element.
  const int64_t cb = 256, ncb = (H + cb - 1) / cb;
  run(ncb, [&](int64_t task) {
    int64_t c0 = task * cb, c1 = std::min(H, c0 + cb);
    for (int64_t j = 0; j < R; ++j) {
      int64_t r = order[j];
      float gw = a.gate[r];
      float* yt = a.y + int64_t(a.tok[r]) * H;
      const float* o = &out[j * H];
      const float* b = a.w2.bias ? a.w2.bias + a.eid[r] * H : nullptr;
      for (int64_t c = c0; c < c1; ++c) yt[c] += gw * (o[c] + (b ? b[c] : 0.f));
    }
  });
}

}  // namespace ft
