// Prefill attention (cpu/attn_prefill.h), one task in plain loops: the ground truth of the SIMD builds, with
// their blocking (lane groups of kPrefillGroup rows, key blocks of kPrefillKeyBlock from the task's first
// visible key) and their rounding (weights to bf16 for the value sum, their sum of the rounded weights).
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/arch/rows_common.h"  // FloatBuf, formats.h (bf16 <-> fp32)
#include "cpu/attn_prefill.h"

namespace ft {

void attn_prefill_scalar(const PrefillAttn& a, const PrefillTask& t) {
  const int64_t G = a.N / a.K, D = a.D, Dv = a.Dv, rows = (t.i1 - t.i0) * G;
  const int64_t* table = a.page_table + t.b * a.pmax;
  const int64_t lo = prefill_first_key(a, prefill_qpos(a, t.b, t.i0)), hi = prefill_qpos(a, t.b, t.i1 - 1) + 1;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  thread_local FloatBuf buf;
  float* s = buf.get(kPrefillKeyBlock + Dv);  // one row's scores of a block, then its value sum
  float* acc = s + kPrefillKeyBlock;
  for (int64_t r = 0; r < rows; ++r) {  // rows are independent: one at a time, the SIMD blocking kept
    const int64_t i = t.i0 + r / G, n = t.kh * G + r % G, pos = prefill_qpos(a, t.b, i);
    const int64_t first = prefill_first_key(a, pos);
    const uint16_t* q = a.q + ((t.t0 + i) * a.N + n) * D;
    float m = -kInf, l = 0.f;
    std::fill(acc, acc + Dv, 0.f);
    for (int64_t j0 = lo; j0 < hi; j0 += kPrefillKeyBlock) {
      const int64_t nb = std::min(kPrefillKeyBlock, hi - j0);
      if (j0 > pos || j0 + nb <= first) continue;  // the SIMD task skips the blocks none of a group's rows see
      float mx = -kInf;
      for (int64_t jj = 0; jj < nb; ++jj) {
        const int64_t j = j0 + jj;
        s[jj] = -kInf;
        if (j < first || j > pos) continue;
        const uint16_t* k = a.k + ((table[j / a.S] * a.S + j % a.S) * a.K + t.kh) * D;
        float dot = 0.f;
        for (int64_t d = 0; d < D; ++d) dot += bf16_to_f32(q[d]) * bf16_to_f32(k[d]);
        s[jj] = a.scale * dot;
        mx = std::max(mx, s[jj]);
      }
      const float mnew = std::max(m, mx), msafe = mnew == -kInf ? 0.f : mnew;
      const float alpha = std::exp(m - msafe);
      l *= alpha;
      for (int64_t d = 0; d < Dv; ++d) acc[d] *= alpha;
      for (int64_t jj = 0; jj < nb; ++jj) {
        const float w = bf16_to_f32(f32_to_bf16(std::exp(s[jj] - msafe)));
        if (w == 0.f) continue;
        const int64_t j = j0 + jj;
        const uint16_t* v = a.v + ((table[j / a.S] * a.S + j % a.S) * a.K + t.kh) * Dv;
        l += w;
        for (int64_t d = 0; d < Dv; ++d) acc[d] += w * bf16_to_f32(v[d]);
      }
      m = mnew;
    }
    if (a.sinks) l += std::exp(a.sinks[n] - m);
    float* out = a.o + ((t.t0 + i) * a.N + n) * Dv;
    for (int64_t d = 0; d < Dv; ++d) out[d] = acc[d] / l;
  }
}

}  // namespace ft
