// One decoder layer of a decode step in one call: the per-layer chain that ft_core runs as ~20 Python-level
// ops (norm, q/k/v projection, QK norm, rotary, KV write, paged attention, output projection, residual, norm,
// router, top-k, routed experts, residual) over the kernels of this directory, with bf16 activations, for a
// GQA attention layer over paged KV and a routed-expert MLP. The same kernels in the same order with the
// roundings ft_core's bf16 path applies between them (each projection's fp32 output rounded to bf16, residual
// sums rounded to bf16), so the result equals that path's bit for bit; what it removes is the Python between
// the kernels (~0.25 ms a layer, which is 10-30 % of a 4-bit Qwen3-30B-A3B layer's weight-read time).
// Python-free.
#pragma once
#include <cstdint>

#include "cpu/formats.h"
#include "cpu/moe_ffn.h"
#include "cpu/router.h"

namespace ft {

struct DenseRef {
  WeightMat w;                  // [N, K]
  const float* bias = nullptr;  // [N] fp32 or nullptr
  bool act_int8 = false;        // opt-in int8 activations (cpu/q8.h)
};

enum class QkNorm : int { NONE = 0, HEAD = 1, FULL = 2 };  // per head over D, or over the whole projection

struct DecodeLayer {
  int64_t H = 0, N = 0, K = 0, D = 0;  // hidden, query heads, KV heads, head dim
  float eps = 1e-6f;                   // RMSNorm epsilon (layer norms and QK norms)
  const uint16_t* ln1 = nullptr;       // [H] bf16: input norm
  const uint16_t* ln2 = nullptr;       // [H] bf16: post-attention norm
  DenseRef qkv;                        // [(N + 2K) D, H]: q rows, k rows, v rows
  DenseRef o;                          // [H, N D]
  QkNorm qk_norm = QkNorm::NONE;
  const uint16_t* q_norm = nullptr;  // [D] (HEAD) or [N D] (FULL) bf16
  const uint16_t* k_norm = nullptr;  // [D] or [K D] bf16
  bool rope_interleaved = false;
  float attn_scale = 1.f;
  int64_t window = 0;             // > 0: sliding window of this many keys
  const float* sinks = nullptr;   // [N] fp32 or nullptr
  DenseRef router;                // [E, H]
  int top_k = 1;
  RouteKind route = RouteKind::SOFTMAX;
  bool renorm = false;
  int64_t base = 0;               // flat id of this layer's expert 0 in the bank
  ExpertBankRef w13, w2;          // the shared expert bank
  Act act = Act::SWIGLU;
  float alpha = 1.702f, limit = 7.f;
  bool experts_int8 = false;
};

struct DecodeStep {
  uint16_t* x = nullptr;  // [T, H] bf16 residual stream, updated in place
  int64_t T = 0;          // tokens = sequences, one new token each
  uint16_t* k_pool = nullptr;  // [P, S, K, D] bf16 (the new tokens' keys are written at `slots`)
  uint16_t* v_pool = nullptr;  // [P, S, K, D] bf16
  int64_t P = 0, S = 0, pmax = 0;
  const int64_t* page_table = nullptr;  // [T, pmax]
  const int64_t* ctx = nullptr;         // [T] context lengths, the new token included
  const int64_t* slots = nullptr;       // [T] flat pool row (page * S + offset) of each new token
  const float* cos = nullptr;           // [T, R/2]
  const float* sin = nullptr;           // [T, R/2]
  int64_t R = 0;                        // rotated dims per head
  int32_t* eid_out = nullptr;           // [T, top_k] or nullptr: the routed experts (flat ids), for a routing record
};

// x <- x + attn(norm1(x)); x <- x + experts(norm2(x)), as above. Throws std::invalid_argument on bad sizes.
void decode_layer(const DecodeLayer& L, const DecodeStep& s);

}  // namespace ft
