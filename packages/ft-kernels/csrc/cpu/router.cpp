#include "cpu/router.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace ft {
namespace {

using Elem = std::pair<double, int64_t>;  // (value, expert)

// torch.topk(largest=True, sorted=True) on the CPU, step for step (ATen's TopKImpl.h): (value, index) pairs in
// index order, NaN above every number, std::partial_sort when k * 64 <= n, else std::nth_element and a sort of
// the first k - 1 -- so that equal values (frequent among bf16 logits) pick the same experts torch picks.
void torch_topk(std::vector<Elem>& q, int k) {
  auto above = [](const Elem& x, const Elem& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  const int64_t n = static_cast<int64_t>(q.size());
  if (int64_t(k) * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), above);
  } else {
    std::nth_element(q.begin(), q.begin() + k - 1, q.end(), above);
    std::sort(q.begin(), q.begin() + k - 1, above);
  }
}

}  // namespace

void route_topk(const float* logits, int64_t T, int64_t E, int k, RouteKind kind, bool renorm, int64_t base,
                int32_t* tok, int32_t* eid, float* gate) {
  std::vector<Elem> q(E);
  std::vector<float> p(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    float* g = gate + t * k;
    if (kind == RouteKind::SOFTMAX) {  // p = exp(l - max) / sum; a NaN logit makes every p NaN, as torch's softmax
      float mx = -INFINITY;
      bool nan = false;
      for (int64_t e = 0; e < E; ++e) {
        nan = nan || std::isnan(l[e]);
        mx = std::max(mx, l[e]);
      }
      if (nan) mx = NAN;
      float sum = 0.f;
      for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
      for (int64_t e = 0; e < E; ++e) q[e] = {static_cast<double>(p[e] / sum), e};
      torch_topk(q, k);
      float s = 0.f;
      for (int j = 0; j < k; ++j) s += (g[j] = static_cast<float>(q[j].first));
      if (renorm)
        for (int j = 0; j < k; ++j) g[j] /= s;
    } else {  // the k largest logits, then softmax over them
      for (int64_t e = 0; e < E; ++e) q[e] = {static_cast<double>(l[e]), e};
      torch_topk(q, k);
      const float mx = static_cast<float>(q[0].first);
      float s = 0.f;
      for (int j = 0; j < k; ++j) s += (g[j] = std::exp(static_cast<float>(q[j].first) - mx));
      for (int j = 0; j < k; ++j) g[j] /= s;
    }
    for (int j = 0; j < k; ++j) {
      tok[t * k + j] = static_cast<int32_t>(t);
      eid[t * k + j] = static_cast<int32_t>(base + q[j].second);
    }
  }
}

}  // namespace ft
