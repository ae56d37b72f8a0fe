// AVX-512 BF16, bf16 activations (cpu/bf16act.h) for the 8-bit X16 formats (cpu/formats.h: INT8_SYM_X16, GGUF Q8_0's
// groups of 32; FP8_E4M3_X16, HF FP8 checkpoints' blocks): rows in the lanes.
//
// Without this, bf16 x met these weights in the fp32 kernels at decode (each byte widened, converted and multiplied
// in fp32). Here one 64-byte load is 4 columns of 16 rows (dword i: row i's columns 4p..4p+3). Words hold columns
// (4p, 4p + 1) and (4p + 2, 4p + 3), so the word's low byte gives columns 4p and 4p + 2 of the lane's pair, its high
// byte (word >> 8) columns 4p + 1 and 4p + 3, each met by x's matching pair (x16_prep's order) in `vdpbf16ps`; one
// scale FMA per 32 columns of 16 rows; no horizontal sums, no sums of x.
// - INT8: q is l - 128 h (l its low 7 bits, h its sign bit), and both parts become exact bf16 by one ternary-logic
//   op on a word: (word & 0x7f) | 0x4300 is bf16(128 + l), (word & 0x80) | 0xc300 is bf16(-128 - 128 h); their sum is
//   q. Per 64 weights and token 4 `vdpbf16ps`, after 1 shift and 4 ternary-logic ops shared by the tile's tokens.
//   The parts sum terms up to (256 + |q|) |x|, not |q| |x| (fp32_bounds.int8_x16_terms).
// - FP8 e4m3: the bf16 of the 7-bit magnitude from a 128-entry table (two `vpermi2w` of 64 entries, chosen by bit 6:
//   subnormals exact, 0x7f NaN), the sign or-ed in. Per 64 weights and token 2 `vdpbf16ps` after 12 shared ops.
// Every value and product with bf16 x is exact in fp32, so results differ from the row-wise kernels' only in fp32
// rounding.
//
// Two `vdpbf16ps` a column pair bound it at ~50 GMAC/s a Zen 4 core from 8 tokens, half the tokens-in-lanes
// prefill kernel's ~90 (x86_avx512bf16_tokgemm.h) on INT8: from 12 tokens that kernel runs on the call's rows put
// back in row order (16 x 16 dword transposes; a decoder gathering each row's dwords from the tiles ran at 30-60).
// One Zen 4 core, [73728, 2048] from DRAM, bf16 x, GMAC/s at T = 1 / 2 / 4 / 8, row-wise (fp32 kernel) -> this one:
// 11-12 / 18.5 / 17 / 18 -> 19-20 / 38.5 / 40 / 45.
#include <immintrin.h>

#include "cpu/arch/rows_common.h"         // FT_UNROLL, FloatBuf
#include "cpu/arch/x86_avx512bf16_bytes.h"  // Int8Parts, Fp8Parts
#include "cpu/arch/x86_avx512bf16_x16.h"    // x16_rows, ScaledX16

namespace ft {
namespace {

// v[k] dword i -> v[i] dword k (a 16 x 16 transpose of dwords).
inline void transpose16(__m512i (&v)[16]) {
  __m512i t[16], u[16];
  FT_UNROLL for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  FT_UNROLL for (int i = 0; i < 4; ++i) {  // u[4i + j], 128-bit lane L: v[4i..4i+3]'s dword 4L + j
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  FT_UNROLL for (int j = 0; j < 4; ++j) {
    const __m512i a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), b = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44),
                  c = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee), d = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    v[j] = _mm512_shuffle_i32x4(a, b, 0x88), v[4 + j] = _mm512_shuffle_i32x4(a, b, 0xdd);
    v[8 + j] = _mm512_shuffle_i32x4(c, d, 0x88), v[12 + j] = _mm512_shuffle_i32x4(c, d, 0xdd);
  }
}

// Rows [r0, r1) (whole groups of 16) of an INT8_SYM_X16 matrix m back as INT8_SYM rows in q [r1 - r0, cols] and s
// [r1 - r0, scale_stride]: 64 bytes of 16 rows (4 columns each) at a time, transposed as dwords.
inline void rows_back(const WeightMat& m, int64_t r0, int64_t r1, int8_t* q, float* s) {
  const int64_t cols = m.cols, ns = m.scale_stride;
  for (int64_t r = r0; r < r1; r += 16) {
    const uint8_t* g = m.q + r * cols;
    int8_t* o = q + (r - r0) * cols;
    int64_t c = 0;
    for (; c + 64 <= cols; c += 64) {
      __m512i v[16];
      FT_UNROLL for (int k = 0; k < 16; ++k) v[k] = _mm512_loadu_si512(g + 16 * c + 64 * k);  // columns c + 4k..
      transpose16(v);
      FT_UNROLL for (int i = 0; i < 16; ++i) _mm512_storeu_si512(o + i * cols + c, v[i]);
    }
    for (; c < cols; ++c)
      for (int i = 0; i < 16; ++i) o[i * cols + c] = static_cast<int8_t>(m.q[i8_x16_at(cols, r + i, c)]);
    for (int i = 0; i < 16; ++i)
      for (int64_t k = 0; k < ns; ++k)
        s[(r - r0 + i) * ns + k] = x16_scale(m, nib_x16_scale_at(ns, r + i, k));
  }
}

}  // namespace

// x86_avx512bf16_int8.cpp: the tokens-in-lanes prefill kernel on INT8_SYM rows; returns the tokens done.
int64_t tok_rows_bf16act_int8_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                         int64_t ldx, float* Y, int64_t ldy);

void rows_bf16act_int8x16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                     int64_t ldx, float* Y, int64_t ldy) {
  int64_t done = 0;
  if (ntok >= 12 && r0 % 16 == 0 && r1 % 16 == 0) {  // prefill: the rows put back, for the tokens-in-lanes kernel
    thread_local FloatBuf qb, sb;
    const int64_t n = r1 - r0;
    int8_t* q = reinterpret_cast<int8_t*>(qb.get((n * m.cols + 3) / 4));
    float* s = sb.get(n * m.scale_stride);
    rows_back(m, r0, r1, q, s);
    WeightMat w = m;
    w.fmt = Fmt::INT8_SYM, w.rows = n, w.q = reinterpret_cast<const uint8_t*>(q), w.q_stride = m.cols, w.scale = s;
    w.scale_f16 = false;
    done = tok_rows_bf16act_int8_avx512bf16(w, 0, n, X, ntok, ldx, Y, ldy);
  }
  if (done < ntok) x16_rows<ScaledX16<Int8Parts>>(m, r0, r1, X + done * ldx, ntok - done, ldx, Y + done * ldy, ldy);
}

void rows_bf16act_fp8x16_avx512bf16(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok,
                                    int64_t ldx, float* Y, int64_t ldy) {
  x16_rows<ScaledX16<Fp8Parts>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft
