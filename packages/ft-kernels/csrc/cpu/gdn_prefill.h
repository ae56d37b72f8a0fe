// The gated delta rule of a Gated DeltaNet layer (Qwen3-Next / Qwen3.5 linear attention) over one sequence's
// prefill tokens, token by token (the recurrent form), from the short conv's output to the core output before the
// gated RMSNorm, on the sequence's recurrent state in place. Tasks on the pool are (value head, block of NB state
// columns): a column of the [Dk, Dv] state evolves on its own (its delta reads only that column), so a task keeps
// its [Dk, NB] block in L1 across all L tokens. On the CPU this costs ~4 Dk Dv multiply-adds a token and head,
// fewer than the chunked (WY) form's, which is built for tensor cores. Python-free.
#pragma once
#include <cstdint>

namespace ft {

// Legend: L tokens, C = 2 Hk Dk + Hv Dv conv channels (q, k, v), Hk / Hv key / value heads (Hv % Hk == 0; value
// head h reads key head h / (Hv / Hk)), Dk / Dv key / value dims. "act" = bf16 (bf16 == true) or fp32.
struct GdnPrefill {
  int64_t L, Hk, Hv, Dk, Dv;
  bool bf16;
  const void* y;      // [L, ys] act: the conv + SiLU output, columns (q | k | v) first (C of them)
  int64_t ys;         // y's row stride in elements (>= C)
  const float* g;     // [L, Hv] log decay (<= 0)
  const float* beta;  // [L, Hv]
  float* state;       // [Hv, Dk, Dv] the sequence's recurrent state, advanced in place
  float* out;         // [L, Hv, Dv] the core output
};

// Per token t and value head h, in fp32 arithmetic (q, k, v read from y):
//   q = l2(q) Dk^-1/2, k = l2(k)    (l2(x) = x / sqrt(sum x^2 + 1e-6))
//   S <- e^g S;  delta = beta (v - S^T k);  S <- S + k delta^T;  o = S^T q
// the same rule as gdn_decode's (cpu/gdn_decode.h), with e^g applied to S^T k and, in the update, to S.
void gdn_prefill(const GdnPrefill& p);

// Columns of the state one task of gdn_prefill keeps (the last block of a head may be narrower).
constexpr int64_t kGdnBlock = 32;

// One task of gdn_prefill (per-ISA builds of cpu/arch/gdn_rule.h): value head h, state columns j0 .. j0 + nb - 1
// (nb <= kGdnBlock), over all L tokens. qk: [L, Hk, 2, Dk] fp32, every token's normalised q (scaled) and k.
// scratch: Dk kGdnBlock floats.
using GdnRuleFn = void (*)(const GdnPrefill& p, const float* qk, int64_t h, int64_t j0, int64_t nb, float* scratch);

}  // namespace ft
