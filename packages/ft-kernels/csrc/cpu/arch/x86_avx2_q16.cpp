// AVX2: bf16 activations into Q16Act's 16-bit blocks (cpu/q8.h: a power-of-two scale per block of 32 columns,
// codes rounded half to even, each block's even columns then its odd ones) for the 16-bit K-quant kernels of x86_avx2_q8kquant.cpp. Twin:
// ft_kernels.reference.quantize_act_i16.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "cpu/arch/x86_avx2.h"  // hsum_i32
#include "cpu/q8.h"

namespace ft {

namespace {

inline float pow2(int e) {  // 2^e for -126 <= e <= 127
  const uint32_t bits = static_cast<uint32_t>(e + 127) << 23;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

void quantize_q16_avx2(const uint16_t* x, int64_t cols, int16_t* q, float* d, float* sd) {
  const __m256i mag = _mm256_set1_epi16(0x7fff);
  for (int64_t b = 0; b < cols / 32; ++b) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * b));       // columns 0..15
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * b + 16));  // 16..31
    // max |x| as bf16 bits: for non-negative bf16 (and Inf, NaN above them) integer order is value order
    const __m256i a = _mm256_max_epu16(_mm256_and_si256(v0, mag), _mm256_and_si256(v1, mag));
    __m128i m = _mm_max_epu16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    m = _mm_max_epu16(m, _mm_srli_si128(m, 8));
    m = _mm_max_epu16(m, _mm_srli_si128(m, 4));
    m = _mm_max_epu16(m, _mm_srli_si128(m, 2));
    const int field = (_mm_cvtsi128_si32(m) & 0x7fff) >> 7;  // the biased exponent of max |x|
    int16_t* qb = q + 32 * b;
    if (field == 255) {  // Inf or NaN: the block's products are NaN
      for (int i = 0; i < 32; ++i) qb[i] = 0;
      d[b] = sd[2 * b] = sd[2 * b + 1] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const int E = field - 127 < -100 ? -100 : field - 127;  // zero and tiny blocks: clamped (codes round to 0)
    const __m256 inv = _mm256_set1_ps(pow2(14 - E));
    // dword j of v holds columns 2j (low half) and 2j + 1 (high half): each as fp32 by a shift or a mask; x / d
    // exactly (a power of two), rounded half to even (MXCSR's default) to int32
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    auto code = [&](__m256i f) { return _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(f), inv)); };
    const __m256i e0 = code(_mm256_slli_epi32(v0, 16)), o0 = code(_mm256_and_si256(v0, hi));  // columns 0..15
    const __m256i e1 = code(_mm256_slli_epi32(v1, 16)), o1 = code(_mm256_and_si256(v1, hi));  // 16..31
    // vpackssdw packs per 128-bit lane ([e0 0..3, e1 0..3 | e0 4..7, e1 4..7]); vpermq puts the quarters in order
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_permute4x64_epi64(_mm256_packs_epi32(e0, e1), 0xd8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + 16), _mm256_permute4x64_epi64(_mm256_packs_epi32(o0, o1), 0xd8));
    const float db = pow2(E - 14);
    d[b] = db;
    sd[2 * b] = db * static_cast<float>(hsum_i32(_mm256_add_epi32(e0, o0)));  // |sum| < 2^20: exact
    sd[2 * b + 1] = db * static_cast<float>(hsum_i32(_mm256_add_epi32(e1, o1)));
  }
}

}  // namespace ft
