// Expert weight formats as the CPU kernels read them. Python-free.
//
// A WeightMat is one expert's matrix W [rows, cols] (y = W x). Layouts, row-major, one row after
// another (row strides in bytes / elements below), nibbles low first (column 2j in the low nibble):
//   BF16       q: uint16 [rows, cols]
//   F16        q: uint16 [rows, cols] (IEEE half)
//   FP8_E4M3   q: uint8  [rows, cols]; scale: fp32 [rows, ceil(cols/group)]   W = e4m3(q) * scale
//              (checkpoint block scales [ceil(rows/B0), ceil(cols/B1)] are expanded to one row each)
//   MXFP4      q: uint8  [rows, cols/2]; scale: uint8 e8m0 [rows, cols/32]       W = e2m1(q) * 2^(s-127)
//   NVFP4      q: uint8  [rows, cols/2]; scale: uint8 e4m3 [rows, cols/16]       W = e2m1(q) * e4m3(s) * global
//   INT4_SYM   q: uint8  [rows, cols/2]; scale: fp32 [rows, ceil(cols/group)]  W = (q - 8) * scale
//   INT4_ASYM  as INT4_SYM plus zero: uint8 [rows, ceil(cols/group)] in 0..15       W = (q - zero) * scale
//   INT8_SYM   q: int8   [rows, cols]; scale: fp32 [rows, ceil(cols/group)]       W = q * scale  (GGUF Q8_0: group 32)
//   Q4_K, Q5_K, Q6_K, Q3_K, Q2_K  GGUF's K-quant super-blocks of 256 columns, stored as llama.cpp writes them (no scale
//              array: each block carries its own): q: uint8 [rows, cols/256 * kquant_block_bytes]; cols % 256 == 0
//     Q4_K  144 B: f16 d, f16 dmin, 12 B of 6-bit (scale, min) pairs for 8 sub-blocks of 32, 128 B nibbles;
//           columns 64j..64j+31 the low nibbles of bytes 32j.., 64j+32.. the high ones; W = d sc q - dmin m
//     Q5_K  176 B: as Q4_K plus 32 B of high bits before the nibbles (bit s of byte l: column 32s + l)
//     Q6_K  210 B: 128 B low nibbles, 64 B high 2-bit pairs, 16 int8 scales (one per 16 columns), f16 d;
//           W = d sc (q - 32), q in 0..63
//     Q3_K  110 B: 32 B high bits (hmask), 64 B 2-bit low parts, 12 B of 6-bit scales (one per 16 columns), f16 d;
//           column 128n + 32j + l (n < 2, j < 4, l < 32): low bits (byte 32 + 32n + l >> 2j) & 3, high bit
//           bit 4n + j of hmask byte l; q = low + 4 high - 4 in -4..3; scale k = e / 16 has its low 4 bits in
//           the nibble k / 8 of byte 96 + k % 8, its high 2 bits at bit 2 (k / 4) of byte 104 + k % 4;
//           W = d (sc - 32) q
//     Q2_K  84 B: 16 B (4-bit scale | 4-bit min << 4), one per 16 columns, 64 B 2-bit codes (column 128n + 32j + l:
//           (byte 16 + 32n + l >> 2j) & 3), f16 d, f16 dmin; W = d sc q - dmin m
//   Q4_K_X16   Q4_K's blocks with 16 rows interleaved (ft_kernels.kquants.to_x16, made at load for the int8-activation
//              kernel, whose lanes are rows): rows % 16 == 0, cols % 256 == 0, q_stride >= cols/256 * 144 (a Q4_K
//              matrix is repacked in place; rows padded as in mixed banks leave their padding at the matrix's end,
//              so the tiles are one gapless stream). Super-block s of rows 16g..16g+15 is the tile of kX16Tile bytes
//              at kX16Tile (g cols/256 + s):
//                [0, 2048)     nibbles: byte 64p + 4i + b (p < 32, b < 4) of row i: low nibble column 8p + b, high 8p + 4 + b
//                [2048, 2240)  byte 16k + i: byte k of row i's 12 packed (scale, min) bytes
//                [2240, 2272)  f16 d of row i at 2i;  [2272, 2304) f16 dmin of row i at 2i
//              W as Q4_K.
//   Q6_K_X16   Q6_K's blocks with 16 rows interleaved (ft_kernels.kquants.to_x16, made at load for the bf16-activation
//              kernel with rows in the lanes), under the same conditions (rows of >= cols/256 * 210 bytes). Tile of
//              kX16Q6Tile bytes per super-block s of rows 16g..16g+15, at kX16Q6Tile (g cols/256 + s); column
//              8p + o (p < 32, o < 8) of row i:
//                [0, 2048)     its code's low 4 bits: as Q4_K_X16's nibbles (byte 64p + 4i + o % 4, nibble o / 4)
//                [2048, 3072)  its code's high 2 bits: in the 16-bit word at 2048 + 64 (p / 2) + 4i + 2 h, bits
//                              4k + 4 + 2 (p % 2) for k < 3, 2 (p % 2) for k = 3 (h = (o / 2) % 2, k = 2 (o % 2) + o / 4:
//                              nibble k of the low bits' word h is the same column)
//                [3072, 3328)  byte 16j + i: row i's int8 scale j (columns 16j..16j+15)
//                [3328, 3360)  f16 d of row i at 2i
//              W as Q6_K.
//   Q5_K_X16   Q5_K's blocks with 16 rows interleaved (ft_kernels.kquants.to_x16, made at load for the bf16-activation
//              kernel with rows in the lanes), under the same conditions (rows of >= cols/256 * 176 bytes). Tile of
//              kX16Q5Tile bytes per super-block s of rows 16g..16g+15, at kX16Q5Tile (g cols/256 + s); column 8p + o
//              (p = 4P + e: sub-block P, e < 4; o < 8) of row i:
//                [0, 2048)     its code's low 4 bits: as Q4_K_X16's nibbles (byte 64p + 4i + o % 4, nibble o / 4)
//                [2048, 2560)  its code's fifth bit: in 16-bit word w at 2048 + 64 P + 4i + 2w, bit 4k + 4 + e of
//                              word h for k < 3, bit e of word 1 - h for k = 3 (h = (o / 2) % 2, k = 2 (o % 2) + o / 4:
//                              nibble k of the low bits' word h is the same column; x16_fifth_at)
//                [2560, 2752)  byte 16k + i: byte k of row i's 12 packed (scale, min) bytes
//                [2752, 2784)  f16 d of row i at 2i;  [2784, 2816) f16 dmin of row i at 2i
//              W as Q5_K.
//   Q3_K_X16   Q3_K's blocks with 16 rows interleaved (ft_kernels.kquants.to_x16, made at load for the bf16-activation
//              kernel with rows in the lanes), under the same conditions (rows of >= cols/256 * 110 bytes). Tile of
//              kX16Q3Tile bytes per super-block s of rows 16g..16g+15, at kX16Q3Tile (g cols/256 + s); its 3-bit
//              code (low 2 bits + 4 x its high bit; W = d (sc - 32) (code - 4)) of column 16p + 8 (k / 4) + {0, 4,
//              1, 5}[k % 4] + 2h (p < 16: sub-block p, k < 8, h < 2) of row i:
//                [0, 1024)     low 2 bits: bits 2k of the 16-bit word at 64p + 4i + 2h
//                [1024, 1536)  high bit: in the 16-bit word w at 1024 + 64 (p / 2) + 4i + 2w, bit 2k + 2 + p % 2 of
//                              word h for k < 7, bit p % 2 of word 1 - h for k = 7 (x16_q3_high_at)
//                [1536, 1728)  byte 16k + i: byte k of row i's 12 packed 6-bit scales
//                [1728, 1760)  f16 d of row i at 2i
//              W as Q3_K.
//   MXFP4_X16  MXFP4 with 16 rows interleaved (ft_kernels.formats.nib_to_x16, made at load for the bf16-activation
//              kernel with rows in the lanes): rows % 16 == 0, cols % 32 == 0, rows unpadded (q_stride cols/2,
//              scale_stride cols/32), repacked in place. Block j (columns 32j..32j+31) of rows 16g..16g+15:
//                q      256 bytes at 256 (g cols/32 + j): byte 64p + 4i + b (p < 4, b < 4) of row i: low nibble column
//                       32j + 8p + b, high 32j + 8p + 4 + b (Q4_K_X16's nibble order)
//                scale  16 bytes at 16 (g cols/32 + j): byte i row i's e8m0
//              W as MXFP4.
//   INT4_SYM_X16  INT4_SYM with 16 rows interleaved, the same way (ft_kernels.formats.nib_to_x16; group % 32 == 0):
//              q as MXFP4_X16's; scale: fp32, the 16 rows' scales of group k (columns group k ..) of rows 16g..16g+15
//              at 16 (g ceil(cols/group) + k) floats, row i's at + i. W as INT4_SYM.
//   INT8_SYM_X16  INT8_SYM with 16 rows interleaved (ft_kernels.formats.int8_to_x16, made at load for the bf16-activation
//              kernel with rows in the lanes; group % 32 == 0): rows % 16 == 0, cols % 32 == 0, rows unpadded (q_stride
//              cols). Block j (columns 32j..32j+31) of rows 16g..16g+15: 512 bytes at 512 (g cols/32 + j), byte 64p + 4i
//              + b (p < 8, b < 4) row i's int8 of column 32j + 4p + b; scale as INT4_SYM_X16's. W as INT8_SYM.
//   FP8_E4M3_X16  FP8_E4M3 with 16 rows interleaved as INT8_SYM_X16 is (the same function; group % 32 == 0): its bytes
//              and scales in INT8_SYM_X16's places. W as FP8_E4M3.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ft {

enum class Fmt : int { BF16 = 0, F16, FP8_E4M3, MXFP4, NVFP4, INT4_SYM, INT4_ASYM, INT8_SYM, Q4_K, Q5_K, Q6_K, Q4_K_X16, Q3_K, Q2_K,
                      Q6_K_X16, MXFP4_X16, INT4_SYM_X16, INT8_SYM_X16, FP8_E4M3_X16, Q5_K_X16, Q3_K_X16, COUNT };

struct WeightMat {
  Fmt fmt;
  int64_t rows, cols;
  const uint8_t* q;      // row 0 of this matrix
  int64_t q_stride;      // bytes per row
  const void* scale;     // row 0 of the scales (nullptr for BF16/F16)
  int64_t scale_stride;  // scale elements per row
  const uint8_t* zero;   // INT4_ASYM zero points, row 0 (stride = scale_stride)
  int group;             // columns per scale
  float global_scale;    // NVFP4 per-tensor multiplier (1 otherwise)
  bool scale_f16;        // INT4_SYM_X16, INT8_SYM_X16, FP8_E4M3_X16: scales in f16 (GGUF's own), not fp32
};

// Y[t, r - r0] = sum_c W[r, c] * X[t, c]  for r in [r0, r1), t < ntok. X fp32 [ntok, ldx], Y fp32 [ntok, ldy].
using RowsFn = void (*)(const WeightMat& w, int64_t r0, int64_t r1, const float* X, int64_t ntok, int64_t ldx,
                        float* Y, int64_t ldy);

// ---- scalar element decoders (shared by every ISA's tail handling and by the scalar kernels) ----
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float bf16_to_f32(uint16_t v) { return f32_from_bits(static_cast<uint32_t>(v) << 16); }
// fp32 -> bf16, round to nearest even (torch's rounding); NaN stays a quiet NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}
inline float e4m3_to_f32(uint8_t b) {
  uint32_t sign = (b & 0x80u) << 24, exp = (b >> 3) & 0xf, mant = b & 0x7;
  if (exp == 0) {
    float v = static_cast<float>(mant) * (1.0f / 512.0f);  // mant * 2^-9
    return sign ? -v : v;
  }
  if (exp == 15 && mant == 7) return f32_from_bits(sign | 0x7fc00000u);  // NaN
  return f32_from_bits(sign | ((exp + 120) << 23) | (mant << 20));
}
inline float e2m1_to_f32(uint8_t nib) {
  static const float kE2M1[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  return kE2M1[nib & 0xf];
}
inline float e8m0_to_f32(uint8_t s) { return s == 0 ? f32_from_bits(0x00400000u) : f32_from_bits(static_cast<uint32_t>(s) << 23); }

// INT4 groups the chunked 4-bit kernels (lanes of 8 columns over chunks of 128) can follow: 32 and 64 tile a
// chunk, multiples of 128 hold whole chunks.
inline bool int4_lane_groups(int64_t g) { return g % 128 == 0 || g == 32 || g == 64; }

// Tokens per register tile of the row kernels (arch/rows_common.h and the ISA kernels built on it): each weight vector
// is decoded once per kTokBlock tokens, and a call of up to kTokBlock tokens reads each weight once.
constexpr int kTokBlock = 4;
// Tokens up to which the AVX-512 BF16 kernel of BF16 weights (arch/x86_avx512bf16.h) streams a call of `cols` columns
// in one pass, one row at a time, reading each weight once: as many as keep their x rows (padded, bf16) within ~30 KiB
// of L1, at most 8. One Zen 5 core (48 KiB L1), BF16 from DRAM, GB/s, one pass against 4-row tiles of up to 4 tokens:
// [65536, 2048] 5 / 6 / 7 / 8 tokens (x 21 / 25 / 29 / 33 KiB) 37 / 26.5 / 19.4 / 14-16 against 20.5 / 18 / 17 / 17.8;
// [16384, 7168] 5 / 6 tokens (70 / 84 KiB) 13.3 / 11.5 against 18.1 / 17.2, and 3 / 4 tokens, streamed before this
// rule, 19.1 / 15.3 against 22.4 / 20.8 in tiles.
// The BF16 kernel's x rows: bf16 elements a row, zero-padded to whole chunks of 64 and 32 more (rows a few lines longer
// than a multiple of 4 KiB, so token rows do not alias one L1 set).
inline int64_t bf16_x_ld(int64_t cols) { return (cols + 63) / 64 * 64 + 32; }
inline int64_t bf16_stream_tokens(int64_t cols) {
  return std::max<int64_t>(1, std::min<int64_t>(8, (30 << 10) / (2 * bf16_x_ld(cols))));
}

// K-quant super-blocks: columns per block and bytes per block (0 for the other formats).
constexpr int kQK = 256;
inline int64_t kquant_block_bytes(Fmt f) {
  return f == Fmt::Q4_K || f == Fmt::Q4_K_X16 ? 144
         : f == Fmt::Q5_K || f == Fmt::Q5_K_X16 ? 176
         : f == Fmt::Q6_K || f == Fmt::Q6_K_X16 ? 210
         : f == Fmt::Q3_K || f == Fmt::Q3_K_X16 ? 110
         : f == Fmt::Q2_K                      ? 84
                                               : 0;
}
// Q4_K_X16 / Q5_K_X16 / Q6_K_X16 / Q3_K_X16: one super-block of 16 rows
constexpr int64_t kX16Tile = 2304, kX16Q5Tile = 2816, kX16Q6Tile = 3360, kX16Q3Tile = 1760;
// The K-quant formats with 16 rows interleaved, and the row-wise format each was made from.
inline bool is_x16(Fmt f) {
  return f == Fmt::Q4_K_X16 || f == Fmt::Q5_K_X16 || f == Fmt::Q6_K_X16 || f == Fmt::Q3_K_X16;
}
inline Fmt x16_base(Fmt f) {
  return f == Fmt::Q4_K_X16   ? Fmt::Q4_K
         : f == Fmt::Q5_K_X16 ? Fmt::Q5_K
         : f == Fmt::Q6_K_X16 ? Fmt::Q6_K
         : f == Fmt::Q3_K_X16 ? Fmt::Q3_K
                              : f;
}
// The 4-bit and 8-bit formats with 16 rows interleaved (MXFP4_X16, INT4_SYM_X16; INT8_SYM_X16, FP8_E4M3_X16), and
// those whose kernels take rows in whole groups of 16 (these and the K-quant X16 formats).
inline bool is_nib_x16(Fmt f) { return f == Fmt::MXFP4_X16 || f == Fmt::INT4_SYM_X16; }
inline bool is_byte_x16(Fmt f) { return f == Fmt::INT8_SYM_X16 || f == Fmt::FP8_E4M3_X16; }
inline bool rows_in_16s(Fmt f) { return is_x16(f) || is_nib_x16(f) || is_byte_x16(f); }
// A 4-bit X16 format: the code (nibble) of row r, column c, and the index of its scale (the scale of group k of row r
// in a matrix with ns scales a row).
inline uint8_t nib_x16_code(const uint8_t* q, int64_t cols, int64_t r, int64_t c) {
  return (q[(r / 16) * 8 * cols + 64 * (c / 8) + 4 * (r % 16) + c % 4] >> (4 * ((c % 8) / 4))) & 0xf;
}
inline int64_t nib_x16_scale_at(int64_t ns, int64_t r, int64_t k) { return ((r / 16) * ns + k) * 16 + r % 16; }
// INT4_SYM_X16, INT8_SYM_X16, FP8_E4M3_X16: scale i of w (nib_x16_scale_at), fp32 or f16 (w.scale_f16).
inline float x16_scale(const WeightMat& w, int64_t i) {
  return w.scale_f16 ? f16_to_f32(static_cast<const uint16_t*>(w.scale)[i]) : static_cast<const float*>(w.scale)[i];
}
// The scales of MXFP4_X16 (e8m0 bytes), INT4_SYM_X16, INT8_SYM_X16 and FP8_E4M3_X16 (f16 or fp32, a group of 32 or
// more columns) are a stream of their own beside the codes (nib_x16_scale_at's order), 1/16 of MXFP4's code bytes,
// 1/8 of Q4_0's. The kernels prefetch it as they prefetch the codes, every line of it: the hardware prefetcher alone
// started it anew at every task (MoE experts of Qwen3-30B-A3B shape, T = 1, one Zen 5 core: MXFP4 28-29 -> 31-33
// GB/s). Prefetching one line per 4 blocks left Q4_0's f16 scales (2 lines per 4 blocks) half-covered, and its
// 48-layer model decoded 5 % slower than with no prefetch at all (22.1-22.9 -> 21.3-22.1 tok/s; every line: 23.1-24.1).
// For rows r..r+15, blocks of 32 columns of block_bytes code bytes: at(j) is the scale address as far ahead of
// block j as `ahead` bytes are in the code stream (a group's offset taken linearly: to the line, what a prefetch
// needs); lines(j, n, f) gives f each line of blocks j..j+n-1's.
namespace {  // a copy in each kernel file, built with that file's ISA flags
class X16ScaleAhead {
 public:
  X16ScaleAhead(const WeightMat& m, int64_t r, int block_bytes, int ahead) {
    const bool e8 = m.fmt == Fmt::MXFP4_X16;
    const int64_t es = e8 ? 1 : m.scale_f16 ? 2 : 4, g = e8 ? 32 : m.group;  // a scale's bytes, its columns
    per16_ = es * 16 * 32 * 16 / g;  // scale bytes a block of the 16 rows, times 16
    p_ = static_cast<const char*>(m.scale) + es * nib_x16_scale_at(m.scale_stride, r, 0) + (ahead / block_bytes * per16_ >> 4);
  }
  const char* at(int64_t j) const { return p_ + (j * per16_ >> 4); }
  // the 64-byte lines of blocks j..j+n-1's scales, ahead: each to `fetch`
  template <class F>
  void lines(int64_t j, int n, F fetch) const {
    const char* end = at(j + n);
    for (const char* a = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(at(j)) & ~uintptr_t(63)); a < end; a += 64) fetch(a);
  }

 private:
  const char* p_;
  int64_t per16_;
};
}  // namespace
// INT8_SYM_X16, FP8_E4M3_X16: the byte of row r, column c (its scale: nib_x16_scale_at).
inline int64_t i8_x16_at(int64_t cols, int64_t r, int64_t c) { return (r / 16) * 16 * cols + 64 * (c / 4) + 4 * (r % 16) + c % 4; }
// An X16 format with `cols` columns: the tile of row r's super-block s (r's index in it: r % 16).
inline const uint8_t* x16_tile(Fmt f, const uint8_t* q, int64_t cols, int64_t r, int64_t s) {
  return q + ((r / 16) * (cols / kQK) + s) * 16 * kquant_block_bytes(f);
}
// Q4_K's (0..15), Q5_K's (0..31) and Q6_K's (0..63) codes of block b's 256 columns, in column order, and one
// column's code or-ed into a zeroed block.
inline void q4k_codes(const uint8_t* b, uint8_t* code) {
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 32; ++l) {
      const uint8_t v = b[16 + 32 * j + l];
      code[64 * j + l] = v & 0xf, code[64 * j + 32 + l] = v >> 4;
    }
}
inline void q5k_codes(const uint8_t* b, uint8_t* code) {
  q4k_codes(b + 32, code);  // the nibbles sit 32 B later, after the fifth bits
  for (int c = 0; c < kQK; ++c) code[c] |= ((b[16 + c % 32] >> (c / 32)) & 1) << 4;
}
inline void q6k_codes(const uint8_t* b, uint8_t* code) {
  for (int n = 0; n < 2; ++n)
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo0 = b[64 * n + l], lo1 = b[64 * n + 32 + l], hi = b[128 + 32 * n + l];
      uint8_t* c = code + 128 * n + l;
      c[0] = (lo0 & 0xf) | (hi & 3) << 4, c[32] = (lo1 & 0xf) | ((hi >> 2) & 3) << 4;
      c[64] = (lo0 >> 4) | ((hi >> 4) & 3) << 4, c[96] = (lo1 >> 4) | (hi >> 6) << 4;
    }
}
inline void q4k_put(uint8_t* b, int e, int code) {
  b[16 + 32 * (e / 64) + e % 32] |= static_cast<uint8_t>(code << (4 * ((e % 64) / 32)));
}
// Q3_K's 3-bit codes (low 2 bits + 4 x the high bit, 0..7: W = d (sc - 32) (code - 4)) in column order, and one
// column's code or-ed into a zeroed block.
inline void q3k_codes(const uint8_t* b, uint8_t* code) {
  for (int c = 0; c < kQK; ++c) {
    const int n = c / 128, j = (c % 128) / 32, l = c % 32;
    code[c] = static_cast<uint8_t>(((b[32 + 32 * n + l] >> (2 * j)) & 3) | ((b[l] >> (4 * n + j)) & 1) << 2);
  }
}
inline void q3k_put(uint8_t* b, int e, int code) {
  const int n = e / 128, j = (e % 128) / 32, l = e % 32;
  b[32 + 32 * n + l] |= static_cast<uint8_t>((code & 3) << (2 * j));
  b[l] |= static_cast<uint8_t>((code >> 2) << (4 * n + j));
}
inline void q5k_put(uint8_t* b, int e, int code) {
  q4k_put(b + 32, e, code & 0xf);
  b[16 + e % 32] |= static_cast<uint8_t>((code >> 4) << (e / 32));
}
inline void q6k_put(uint8_t* b, int e, int code) {
  const int n = e / 128, l = e % 32, qu = (e % 128) / 32;
  b[64 * n + l + 32 * (qu & 1)] |= static_cast<uint8_t>((code & 0xf) << (4 * (qu >> 1)));
  b[128 + 32 * n + l] |= static_cast<uint8_t>((code >> 4) << (2 * qu));
}
// Where column c (0..255) of tile row i keeps its low nibble (byte, shift), in Q6_K_X16 its high 2 bits, in Q5_K_X16
// its fifth bit.
inline void x16_nibble_at(int64_t c, int i, int64_t& byte, int& shift) {
  byte = 64 * (c / 8) + 4 * i + c % 4, shift = 4 * ((c % 8) / 4);
}
// Column c's place in a group of 8 of Q4_K_X16's nibble order: its 16-bit word h (0, 1) and nibble k (0..3) there
// (word h's nibble k is column (0, 4, 1, 5)[k] + 2h).
inline void x16_word_nibble(int64_t c, int& h, int& k) {
  const int o = static_cast<int>(c % 8);
  h = (o / 2) % 2, k = 2 * (o % 2) + o / 4;
}
inline void x16_fifth_at(int64_t c, int i, int64_t& byte, int& shift) {
  const int64_t p = c / 8;
  int h, k;
  x16_word_nibble(c, h, k);
  const int word = k < 3 ? h : 1 - h, bit = (k < 3 ? 4 * k + 4 : 0) + static_cast<int>(p % 4);
  byte = 2048 + 64 * (p / 4) + 4 * i + 2 * word + bit / 8, shift = bit % 8;
}
inline void x16_high_at(int64_t c, int i, int64_t& byte, int& shift) {
  const int64_t p = c / 8;
  int h, k;
  x16_word_nibble(c, h, k);
  const int bit = (k < 3 ? 4 * k + 4 : 0) + 2 * static_cast<int>(p % 2);
  byte = 2048 + 64 * (p / 2) + 4 * i + 2 * h + bit / 8, shift = bit % 8;
}
// Q3_K_X16: where column c (0..255) of tile row i keeps its low 2 bits and its high bit (byte, shift); it is code
// k = 4 (c % 16 / 8) + its nibble's k of word h.
inline void x16_q3_low_at(int64_t c, int i, int64_t& byte, int& shift) {
  int h, k;
  x16_word_nibble(c, h, k);
  k += 4 * static_cast<int>((c % 16) / 8);
  byte = 64 * (c / 16) + 4 * i + 2 * h + k / 4, shift = 2 * (k % 4);
}
inline void x16_q3_high_at(int64_t c, int i, int64_t& byte, int& shift) {
  const int64_t p = c / 16;
  int h, k;
  x16_word_nibble(c, h, k);
  k += 4 * static_cast<int>((c % 16) / 8);
  const int word = k < 7 ? h : 1 - h, bit = (k < 7 ? 2 * k + 2 : 0) + static_cast<int>(p % 2);
  byte = 1024 + 64 * (p / 2) + 4 * i + 2 * word + bit / 8, shift = bit % 8;
}
// An X16 format: row r's super-block s back as the block of its base format it was made from (144, 176, 210 or
// 110 B): the scalar kernels' view.
inline void x16_block(Fmt f, const uint8_t* q, int64_t cols, int64_t r, int64_t s, uint8_t* out) {
  const uint8_t* t = x16_tile(f, q, cols, r, s);
  const int i = static_cast<int>(r % 16);
  std::memset(out, 0, kquant_block_bytes(f));
  if (f == Fmt::Q3_K_X16) {
    for (int c = 0; c < kQK; ++c) {
      int64_t at, hat;
      int sh, hsh;
      x16_q3_low_at(c, i, at, sh);
      x16_q3_high_at(c, i, hat, hsh);
      q3k_put(out, c, ((t[at] >> sh) & 3) | ((t[hat] >> hsh) & 1) << 2);
    }
    for (int k = 0; k < 12; ++k) out[96 + k] = t[1536 + 16 * k + i];
    out[108] = t[1728 + 2 * i], out[109] = t[1729 + 2 * i];
    return;
  }
  for (int c = 0; c < kQK; ++c) {
    int64_t at;
    int sh;
    x16_nibble_at(c, i, at, sh);
    const int lo = (t[at] >> sh) & 0xf;
    if (f == Fmt::Q4_K_X16) {
      q4k_put(out, c, lo);
    } else if (f == Fmt::Q5_K_X16) {
      x16_fifth_at(c, i, at, sh);
      q5k_put(out, c, lo | (((t[at] >> sh) & 1) << 4));
    } else {
      x16_high_at(c, i, at, sh);
      q6k_put(out, c, lo | (((t[at] >> sh) & 3) << 4));
    }
  }
  if (f != Fmt::Q6_K_X16) {  // Q4_K / Q5_K: d, dmin, the 12 scale bytes after the codes' planes
    const int64_t sc = f == Fmt::Q5_K_X16 ? 2560 : 2048, d = sc + 192;
    out[0] = t[d + 2 * i], out[1] = t[d + 1 + 2 * i], out[2] = t[d + 32 + 2 * i], out[3] = t[d + 33 + 2 * i];
    for (int k = 0; k < 12; ++k) out[4 + k] = t[sc + 16 * k + i];
  } else {
    for (int j = 0; j < 16; ++j) out[192 + j] = t[3072 + 16 * j + i];
    out[208] = t[3328 + 2 * i], out[209] = t[3329 + 2 * i];
  }
}
// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from a block's 12 scale bytes (llama.cpp's packing).
inline void kquant_scale_min(const uint8_t* s, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q3_K: the 6-bit scale (before the - 32) of sub-block k (0..15) from a block's 12 scale bytes (llama.cpp's packing).
inline int q3k_scale(const uint8_t* s, int k) {
  return ((s[k % 8] >> (4 * (k / 8))) & 0xf) | (((s[8 + k % 4] >> (2 * (k / 4))) & 3) << 4);
}

// Weight (r, c) as fp32: the scalar definition every kernel must agree with.
float weight_at(const WeightMat& w, int64_t r, int64_t c);

// Validation of a matrix description; returns nullptr when fine, else a message.
const char* check_mat(const WeightMat& w);

const char* fmt_name(Fmt f);

}  // namespace ft
