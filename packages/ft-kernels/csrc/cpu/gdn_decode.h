// The core of a Gated DeltaNet layer (Qwen3-Next / Qwen3.5 linear attention) for decode tokens, one per
// sequence, in one call: after the in-projection and before the out-projection, the ~25 torch ops of ft_core's
// recurrent path (short causal conv + SiLU, q / k L2 norms, beta and the log decay g, the delta rule over the
// sequence's recurrent state, the gated RMSNorm with z) on the states in their pools, updated in place. Tasks on
// the pool are (sequence, value head): each reads its [Dk, Dv] fp32 state once from memory and writes it once.
// Python-free.
#pragma once
#include <cstdint>

namespace ft {

// Legend: B sequences (tokens), N state slots, C = 2 Hk Dk + Hv Dv conv channels (q, k, v), Hk / Hv key / value
// heads (Hv % Hk == 0; value head h reads key head h / (Hv / Hk)), Dk / Dv key / value dims, Kc conv taps.
// "act" = bf16 (bf16 == true) or fp32: the activations, conv weights, conv states, norm weight and output.
struct GdnDecode {
  int64_t B, N, Hk, Hv, Dk, Dv, Kc;
  bool bf16;
  const void* proj;       // [B, C + Hv Dv + 2 Hv] act: the in-projection, columns (q k v | z | b | a)
  const void* conv_w;     // [C, Kc] act
  void* conv_state;       // [N, C, Kc - 1] act: the last Kc - 1 conv inputs per slot, shifted in place
  float* state;           // [N, Hv, Dk, Dv] fp32 recurrent state per slot, updated in place
  const int64_t* slots;   // [B] distinct slots in [0, N)
  const float* neg_A;     // [Hv] -exp(A_log)
  const float* dt_bias;   // [Hv]
  const void* norm_w;     // [Dv] act
  float eps;              // gated RMSNorm epsilon
  void* out;              // [B, Hv Dv] act
};

// Per sequence b and value head h, with s = the conv window (conv_state then the new input) and rounding to
// act written act(.):
//   y = act(silu(act(sum_t s_t w_t)))                          (conv channels of q, k and v)
//   q = l2(y_q) Dk^-1/2, k = l2(y_k), v = y_v                  (l2(x) = x / sqrt(sum x^2 + 1e-6))
//   beta = act(sigmoid(b)), g = neg_A softplus(a + dt_bias)    (softplus(x) = x above 20, as torch)
//   S <- e^g S;  delta = beta (v - S^T k);  S <- S + k delta^T;  o = S^T q
//   out = act(act(w act(o_n)) silu(z)), o_n = act(o) / sqrt(mean(act(o)^2) + eps)
// in fp32 arithmetic. Throws std::invalid_argument for a slot outside [0, N) or repeated.
void gdn_decode(const GdnDecode& p);

// One task of gdn_decode (per-ISA builds of cpu/arch/gdn_common.h): sequence b, value head h; reads the conv
// state, writes the recurrent state and out. scratch: 2 Dk + 3 Dv floats.
using GdnHeadFn = void (*)(const GdnDecode& p, int64_t b, int64_t h, float* scratch);

}  // namespace ft
