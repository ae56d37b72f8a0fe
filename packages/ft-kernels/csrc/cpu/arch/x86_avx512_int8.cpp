// AVX-512, INT8 weights with fp32 scales per `group` columns (GGUF Q8_0 is group 32): 16 columns per
// vector, bytes sign-extended to 32 bits and converted to fp32 (exact); the fp8 files' group loop.
// One token and groups of 32 (Q8_0, decode): one row at a time, 64 columns a step in two chains (one a
// group), the weights prefetched avx512_nib::kAhead bytes ahead and the scales once a row that far ahead
// (avx512_nib::prefetch_side): the group loop's 8-row tiles streamed 15-18 GB/s a core from DRAM, this
// ~37 (one Zen 5 core, [32768, 2048]).
#include "cpu/arch/x86_avx512.h"
#include "cpu/arch/x86_avx512_nib.h"  // kAhead, prefetch_side

namespace ft {
namespace {
struct Int8Avx512 : Fp8Common {
  static constexpr float kScaleMul = 1.f;
  static constexpr int kScaleBytes = 4;  // fp32 scales (prefetch_side)
  static __m512 f32(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void decode(const uint8_t* row, int64_t c, __m512& w0, __m512& w1) {
    w0 = f32(row + c);       // columns c..c+15
    w1 = f32(row + c + 16);  // columns c+16..c+31
  }
};

// Y[r - r0] = sum_c W[r, c] x[c], group 32: whole pairs of groups vectorised, the rest by weight_at.
void stream_g32(const WeightMat& m, int64_t r0, int64_t r1, const float* x, float* Y) {
  constexpr int PF = avx512_nib::kAhead;
  const int64_t cv = m.cols / 64 * 64, ss = m.scale_stride;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* q = m.q + r * m.q_stride;
    const float* s = static_cast<const float*>(m.scale) + r * ss;
    avx512_nib::prefetch_side<Int8Avx512>(m, r);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (int64_t c = 0; c < cv; c += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(q + c) + PF, _MM_HINT_T0);
      const __m512 p0 = _mm512_fmadd_ps(Int8Avx512::f32(q + c + 16), _mm512_loadu_ps(x + c + 16),
                                        _mm512_mul_ps(Int8Avx512::f32(q + c), _mm512_loadu_ps(x + c)));
      const __m512 p1 = _mm512_fmadd_ps(Int8Avx512::f32(q + c + 48), _mm512_loadu_ps(x + c + 48),
                                        _mm512_mul_ps(Int8Avx512::f32(q + c + 32), _mm512_loadu_ps(x + c + 32)));
      a0 = _mm512_fmadd_ps(p0, _mm512_set1_ps(s[c / 32]), a0);
      a1 = _mm512_fmadd_ps(p1, _mm512_set1_ps(s[c / 32 + 1]), a1);
    }
    float tail = 0.f;
    for (int64_t c = cv; c < m.cols; ++c) tail += weight_at(m, r, c) * x[c];
    Y[r - r0] = Avx512::hsum(_mm512_add_ps(a0, a1)) + tail;
  }
}
}  // namespace

void rows_int8_avx512(const WeightMat& m, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx, float* Y,
                      int64_t ldy) {
  if (ntok == 1 && m.group == 32)
    stream_g32(m, r0, r1, X, Y);
  else
    group_rows<Avx512, Int8Avx512>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
