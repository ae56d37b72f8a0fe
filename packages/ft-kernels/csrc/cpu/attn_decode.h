// Attention of decode tokens over a paged KV cache: one new query token per sequence attends to every key
// of its context in the cache pools directly (no gather into a padded copy, no mask tensor), one task per
// (sequence, KV head) on the pool, G = N / K query heads sharing each key and value row as it is read.
// Python-free.
#pragma once
#include <cstdint>

namespace ft {

// Legend: B sequences, N query heads, K KV heads (N % K == 0; query head n uses KV head n / (N / K)),
// D key width, Dv value width, P pages of S tokens, Pmax pages per sequence in the page table.
struct DecodeAttn {
  const void* q;  // [B, N, D], fp32 or bf16 (q_bf16)
  bool q_bf16;
  const void* k;  // key pool [P, S, K, D], fp32 or bf16 (kv_bf16)
  const void* v;  // value pool [P, S, K, Dv], same dtype as k
  bool kv_bf16;
  const int64_t* page_table;  // [B, Pmax]: page of token j of sequence b = page_table[b, j / S]
  const int64_t* ctx;         // [B]: keys 0 .. ctx[b] - 1 of sequence b (the query is token ctx[b] - 1)
  int64_t B, N, K, D, Dv, S, P, pmax;
  float scale;          // multiplies q.k
  int64_t window;       // > 0: only the last `window` keys (ctx - window .. ctx - 1); 0: all
  const float* sinks;   // [N] per-head sink logit (one more softmax term with no value; GPT-OSS) or nullptr
  float* o;             // [B, N, Dv] fp32
};

// o[b, n] = sum_j softmax_j(scale q[b, n] . k[b, j]) v[b, j] over the visible keys (with the sink as one more
// logit), fp32 arithmetic: scores, a blockwise online softmax (ft::exp_neg below) and the weighted value sum.
// Throws std::invalid_argument for a page id outside [0, P) or a context longer than the table.
void decode_attention(const DecodeAttn& a);

// One task of decode_attention: sequence b, KV head kh (per-ISA builds of cpu/arch/attn_common.h).
using AttnHeadFn = void (*)(const DecodeAttn& a, int64_t b, int64_t kh);

}  // namespace ft
