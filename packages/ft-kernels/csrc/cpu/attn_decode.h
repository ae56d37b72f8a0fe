// Attention of decode tokens over a paged KV cache: one new query token per sequence attends to every key
// of its context in the cache pools directly (no gather into a padded copy, no mask tensor). Tasks on the pool
// are (sequence, span of keys) for every KV head at once: G = N / K query heads share each key and value row as it
// is read, and a long context is split into spans (>= split_keys keys each) when there are fewer sequences than
// twice the pool's threads, their partial softmax sums merged at the end (flash-decoding).
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
  int64_t split_keys;   // keys per span at least (0: 256 / K, >= 32); spans only where the pool would idle otherwise
};

// o[b, n] = sum_j softmax_j(scale q[b, n] . k[b, j]) v[b, j] over the visible keys (with the sink as one more
// logit), fp32 arithmetic: scores, a blockwise online softmax (exp_neg of cpu/arch/attn_common.h) and the
// weighted value sum per span, spans merged with std::exp. Throws std::invalid_argument for a page id outside
// [0, P) or a context longer than the table.
void decode_attention(const DecodeAttn& a);

// One task of decode_attention: keys lo .. hi - 1 of sequence b for every KV head kh, into its part at parts +
// kh * head_stride = [G, Dv] unnormalised sum of e^(s - m) v, then [G] m (the span's max score), then [G] l (the
// sum of e^(s - m)). Built per ISA from cpu/arch/attn_common.h (exact products), and on AVX-512 BF16 for bf16 q
// and pools (arch/x86_avx512bf16_attn_decode.cpp, at most kMaxHeads KV heads).
using AttnSpanFn = void (*)(const DecodeAttn& a, int64_t b, int64_t lo, int64_t hi, float* parts, int64_t head_stride);
constexpr int64_t kMaxHeads = 64;

}  // namespace ft
