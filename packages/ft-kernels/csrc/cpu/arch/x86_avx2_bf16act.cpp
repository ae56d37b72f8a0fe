// AVX2, BF16 weights x bf16 activations at one token (rows_bf16_one_kernel): x stays bf16 and is decoded as the
// weights are. 16 bf16 (one 256-bit load) give their even columns by a shift left 16 and their odd ones by masking
// the low halves, so the weight and x vectors of a chunk pair up lane by lane with no permutation of x, and the
// products are exact in fp32 (as with x widened first: the same values, another order of the fp32 sums). One row
// at a time, four FMA chains, software prefetch 8 KiB ahead on its stream (rows_common.h's pair_block). Against x
// widened to fp32 and permuted once a call (pair_rows): half the x bytes (a 7168-column row's x is 14 KB, not 28,
// beside the weight stream in L1) and no x permutation. One Zen 5 core, one row of 2048 / 7168 columns a step,
// from DRAM: 36.5 / 32.4 -> 40.5 / 34.3 GB/s; in L2 62.5 -> 67.7.
#include <immintrin.h>

#include <cstdint>

#include "cpu/arch/x86_avx2.h"

namespace ft {
namespace {

// Y[r] = sum_c w[r, c] x[c] for one row: 32 columns a step into four chains, the tail in scalars.
inline float row_dot(const uint16_t* w, const uint16_t* x, int64_t cols) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(w + c) + 8192, _MM_HINT_T0);
    __m256 we, wo, ue, uo, xe, xo, ye, yo;
    bf16_even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c)), we, wo);
    bf16_even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c + 16)), ue, uo);
    bf16_even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c)), xe, xo);
    bf16_even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c + 16)), ye, yo);
    a0 = _mm256_fmadd_ps(we, xe, a0);
    a1 = _mm256_fmadd_ps(wo, xo, a1);
    a2 = _mm256_fmadd_ps(ue, ye, a2);
    a3 = _mm256_fmadd_ps(uo, yo, a3);
  }
  for (; c + 16 <= cols; c += 16) {
    __m256 we, wo, xe, xo;
    bf16_even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c)), we, wo);
    bf16_even_odd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c)), xe, xo);
    a0 = _mm256_fmadd_ps(we, xe, a0);
    a1 = _mm256_fmadd_ps(wo, xo, a1);
  }
  float tail = 0.f;
  for (; c < cols; ++c) tail += bf16_to_f32(w[c]) * bf16_to_f32(x[c]);
  return Avx2::hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))) + tail;
}

}  // namespace

void rows_bf16act_bf16_avx2(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                            float* Y, int64_t ldy) {
  const uint16_t* q = reinterpret_cast<const uint16_t*>(m.q);
  const int64_t qs = m.q_stride / 2;  // bf16 elements a row
  for (int64_t t = 0; t < ntok; ++t)  // one token (rows_bf16_one_kernel's callers); more run token by token
    for (int64_t r = r0; r < r1; ++r) Y[t * ldy + (r - r0)] = row_dot(q + r * qs, X + t * ldx, m.cols);
}

}  // namespace ft
