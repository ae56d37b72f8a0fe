// One decoder layer of a decode step in one call: the per-layer chain that ft_core runs as ~20 Python-level
// ops (norm, q/k/v projection, QK norm, rotary, KV write, paged attention, output projection, residual, norm,
// router, top-k, routed experts, residual) over the kernels of this directory, with bf16 activations, for a
// GQA attention layer over paged KV and a routed-expert MLP -- or, for the Qwen3-Next family, gated attention
// or a Gated DeltaNet layer with (1 + w) norms and a shared expert beside the routed ones. The same kernels in the same order with the
// roundings ft_core's bf16 path applies between them (each projection's fp32 output rounded to bf16, residual
// sums rounded to bf16), so the result equals that path's bit for bit; what it removes is the Python between
// the kernels (~0.25 ms a layer, which is 10-30 % of a 4-bit Qwen3-30B-A3B layer's weight-read time).
// Python-free.
#pragma once
#include <cstdint>

#include <vector>

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

// GQA: q/k/v from `qkv`, or from `parts` (q, k, v rows in their own formats). GATED (Qwen3-Next family full attention): `parts` give per head D query and D gate
// rows, then k and v; (1 + w) norms of q and k per head; o * sigmoid(gate) before `o`. GDN: Gated DeltaNet,
// `parts` give the in-projection (q k v | z | b | a), cpu/gdn_decode.h's core, `o` the out-projection.
enum class AttnKind : int { GQA = 0, GATED = 1, GDN = 2 };

struct GdnWeights {                       // the GDN layer's own weights (cpu/gdn_decode.h's names)
  int64_t Hk = 0, Hv = 0, Dk = 0, Dv = 0, Kc = 0;
  const uint16_t* conv_w = nullptr;       // [C, Kc] bf16
  const float* neg_A = nullptr;           // [Hv]
  const float* dt_bias = nullptr;         // [Hv]
  const uint16_t* norm_w = nullptr;       // [Dv] bf16
  const int64_t* out_order = nullptr;     // [Hv Dv]: input column i of `o` is core column out_order[i]; or nullptr
};

struct SharedExpert {                     // down(silu(gate x) * up x), times sigmoid(gate_w x) when gated
  std::vector<DenseRef> gate_up;          // [I, H] gate rows then [I, H] up rows: one or two parts
  DenseRef down;                          // [H, I]
  bool gated = false;
  DenseRef gate_w;                        // [1, H]
  int64_t I = 0;
};

struct DecodeLayer {
  int64_t H = 0, N = 0, K = 0, D = 0;  // hidden, query heads, KV heads, head dim
  float eps = 1e-6f;                   // RMSNorm epsilon (layer norms and QK norms)
  const uint16_t* ln1 = nullptr;       // [H] bf16: input norm
  const uint16_t* ln2 = nullptr;       // [H] bf16: post-attention norm
  const float* ln1_f32 = nullptr;      // [H] fp32 (1 + w), instead of ln1 / ln2: the (1 + w) norms, rounded once
  const float* ln2_f32 = nullptr;
  AttnKind attn = AttnKind::GQA;
  std::vector<DenseRef> parts;         // GQA (optional) / GATED / GDN: the in-projection in parts (formats may differ)
  const float* q_norm_f32 = nullptr;   // [D] GATED: (1 + w) of q and k per head
  const float* k_norm_f32 = nullptr;
  GdnWeights gdn;
  bool has_shared = false;
  SharedExpert shared;
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
  // GDN layers: this layer's state pools and each token's slot in them (cpu/gdn_decode.h)
  uint16_t* conv_state = nullptr;       // [Ns, C, Kc - 1] bf16
  float* state = nullptr;               // [Ns, Hv, Dk, Dv] fp32
  const int64_t* state_slots = nullptr; // [T]
  int64_t Ns = 0;
};

// x <- x + attn(norm1(x)); x <- x + experts(norm2(x)), as above. Throws std::invalid_argument on bad sizes.
void decode_layer(const DecodeLayer& L, const DecodeStep& s);

}  // namespace ft
