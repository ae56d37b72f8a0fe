// MoE expert FFN over a layer's routes, CPU. Python-free.
#pragma once
#include <cstdint>

namespace ft {

// y[t, :] = sum over routes r with tok[r] == t of gate[r] * W2[e] @ (silu(Wg[e] x_t) * (Wu[e] x_t))
//   x    fp32 [T, H]              y    fp32 [T, H] (overwritten)
//   tok  int32 [R] in [0, T)      eid  int32 [R] in [0, N)      gate fp32 [R]
//   w13  bf16 [N, 2I, H]  (rows 0..I-1 gate, I..2I-1 up)        w2   bf16 [N, H, I]
// Routes that share an expert are computed together: each weight byte is read once per call.
// Throws std::invalid_argument naming the offending argument.
void moe_swiglu_bf16(const float* x, int64_t T, int64_t H, const int32_t* tok, const int32_t* eid,
                     const float* gate, int64_t R, const uint16_t* w13, const uint16_t* w2, int64_t N,
                     int64_t I, float* y);

}  // namespace ft
