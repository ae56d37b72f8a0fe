// Attention of prefill (and mixed) batches over a paged bf16 KV cache: every new token of every sequence
// attends to its visible keys in the cache pools directly (no gather into a padded fp32 copy, no mask tensor),
// causal, with an optional sliding window and per-head sinks. Tasks on the pool are (sequence, KV head, block
// of queries): the block's G query heads x queries are the rows of one flash-attention pass over the keys
// (online softmax in blocks of kPrefillKeyBlock keys), so each key and value row is read once per block.
// Python-free.
#pragma once
#include <cstdint>

namespace ft {

// Keys per online-softmax block, rows per lane group (one zmm of fp32 scores), rows per task (about).
constexpr int64_t kPrefillKeyBlock = 32;
constexpr int64_t kPrefillGroup = 16;
constexpr int64_t kPrefillRows = 128;

// Legend: T packed new tokens, B sequences, N query heads, K KV heads (N % K == 0, G = N / K; query head n
// uses KV head n / G), D key width (even), Dv value width, P pages of S tokens, Pmax pages per sequence.
struct PrefillAttn {
  const uint16_t* q;          // [T, N, D] bf16; sequence b's q_lens[b] tokens are consecutive rows, in order of b
  const uint16_t* k;          // key pool [P, S, K, D] bf16 (this forward's new keys already written)
  const uint16_t* v;          // value pool [P, S, K, Dv] bf16
  const int64_t* page_table;  // [B, Pmax]: page of token j of sequence b = page_table[b, j / S]
  const int64_t* q_lens;      // [B] new tokens of sequence b (>= 0)
  const int64_t* ctx;         // [B] its context with them: new token i sits at position ctx[b] - q_lens[b] + i
  int64_t T, B, N, K, D, Dv, S, P, pmax;
  float scale;         // multiplies q.k
  int64_t window;      // > 0: a query at position p sees keys p - window + 1 .. p; 0: keys 0 .. p
  const float* sinks;  // [N] per-head sink logit (one more softmax term with no value; GPT-OSS) or nullptr
  float* o;            // [T, N, Dv] fp32
};

// Queries i0 .. i1 - 1 of sequence b (packed rows t0 + i) against KV head kh. Row r of the task is query
// i0 + r / G, head kh * G + r % G; rows come in groups of kPrefillGroup lanes.
struct PrefillTask {
  int64_t b, kh, i0, i1, t0;
};

// o[t, n] = sum_j w_j v[j] / sum_j w_j over the keys j visible to token t (and the sink as one more logit),
// w_j = bf16(e^(s_j - m)) with s_j = scale q[t, n] . k[j] summed in fp32 from exact bf16 products and m the
// running max of the block's online softmax: the weights are rounded to bf16 for the value product, as a bf16
// flash-attention kernel does (relative 2^-9 each), and their sum is taken of the rounded weights. Throws
// std::invalid_argument for a page id outside [0, P), a context longer than the table, q_lens outside
// [0, ctx] or summing to other than T.
void prefill_attention(const PrefillAttn& a);

// One task of prefill_attention (per-ISA builds: arch/scalar_attn_prefill.cpp, the ground truth, and
// arch/x86_avx512bf16_attn_prefill.cpp).
using AttnPrefillFn = void (*)(const PrefillAttn& a, const PrefillTask& t);

// Position of the task's query i and the first key it sees.
inline int64_t prefill_qpos(const PrefillAttn& a, int64_t b, int64_t i) { return a.ctx[b] - a.q_lens[b] + i; }
inline int64_t prefill_first_key(const PrefillAttn& a, int64_t pos) {
  return a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
}

}  // namespace ft
