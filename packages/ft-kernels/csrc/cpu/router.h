// MoE routing of a few tokens on the calling thread: the top k of E router logits per token and their gate
// weights, written as the flat route lists the MoE FFN takes (token, expert id, gate) -- what torch does in
// ~6 small ops (softmax, topk, sum, divide, arange, flatten) a layer. Python-free.
#pragma once
#include <cstdint>

namespace ft {

enum class RouteKind : int {
  SOFTMAX = 0,       // p = softmax(logits) over E; the k largest p; gate = p, or p / sum(top p) if renorm
  TOPK_SOFTMAX = 1,  // the k largest logits; gate = softmax over those k (GPT-OSS)
};

// logits fp32 [T, E] (row-contiguous). Route t * k + j: tok = t, eid = base + the j-th pick of token t, gate its
// weight. Picks are torch.topk's on the CPU, ties included (its algorithm, step for step; NaN ranks first), made
// on the probabilities (SOFTMAX) or the logits (TOPK_SOFTMAX), as the routers do in torch. Requires 1 <= k <= E.
void route_topk(const float* logits, int64_t T, int64_t E, int k, RouteKind kind, bool renorm, int64_t base,
                int32_t* tok, int32_t* eid, float* gate);

}  // namespace ft
