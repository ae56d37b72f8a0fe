// MoE expert FFN over a layer's routes, on the CPU thread pool. Python-free.
#pragma once
#include <cstdint>

#include "cpu/formats.h"

namespace ft {

// All experts of one matrix kind (w13 or w2) in one format: expert e's matrix starts at
// q + e * q_expert_bytes (scales and zeros likewise). Rows of w13: gate rows then up rows.
struct ExpertBankRef {
  WeightMat mat;  // expert 0
  int64_t n_experts = 0;
  int64_t q_expert_bytes = 0, scale_expert_bytes = 0, zero_expert_bytes = 0;
  const float* bias = nullptr;  // fp32 [n_experts, rows] or nullptr

  WeightMat expert(int64_t e) const {
    WeightMat m = mat;
    m.q = mat.q + e * q_expert_bytes;
    if (mat.scale) m.scale = static_cast<const uint8_t*>(mat.scale) + e * scale_expert_bytes;
    if (mat.zero) m.zero = mat.zero + e * zero_expert_bytes;
    return m;
  }
};

enum class Act : int { SWIGLU = 0, GPTOSS = 1 };  // GPTOSS: clamp, (up + 1) * gate * sigmoid(alpha * gate)

struct MoeArgs {
  const void* x = nullptr;  // [T, H] fp32, or bf16 when x_bf16
  bool x_bf16 = false;
  int64_t T = 0, H = 0;
  const int32_t* tok = nullptr;  // [R] token of each route
  const int32_t* eid = nullptr;  // [R] expert of each route
  const float* gate = nullptr;   // [R] gate weight
  int64_t R = 0;
  ExpertBankRef w13, w2;  // w13: [2I, H] per expert; w2: [H, I] per expert
  Act act = Act::SWIGLU;
  float alpha = 1.702f, limit = 7.0f;
  bool act_int8 = false;  // opt-in: x and h quantised to int8 per 32 columns (cpu/q8.h) for 4-bit banks
  float* y = nullptr;  // [T, H] fp32, overwritten
};

// y[t] = sum over routes r with tok[r] == t of gate[r] * (W2[e] act(W13[e] x_t + b13[e]) + b2[e]).
// Routes sharing an expert are computed together (each weight byte read once per call). With act_int8 and
// banks the q8 kernels take (q8_supported), x and h enter each matrix as int8 blocks. With x_bf16, h is
// rounded to bf16 (cpu/bf16act.h) and both enter as bf16 (vdpbf16ps where the ISA has it); otherwise fp32.
// Throws std::invalid_argument naming the offending argument.
void moe_experts(const MoeArgs& a);

}  // namespace ft
