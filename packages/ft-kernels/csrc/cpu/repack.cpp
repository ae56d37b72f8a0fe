#include "cpu/repack.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/formats.h"
#include "cpu/threadpool.h"

namespace ft {

namespace {

// A plane of 16-bit words in an X16 tile (formats.h): per group P of nc columns of the super-block, word w of row
// i at base + 64P + 4i + 2w; column nc P + c keeps its field in word word[c] at bit bit[c], the same for every P
// and row, as the plane's locator (formats.h: x16_high_at, x16_fifth_at, x16_q3_low_at, x16_q3_high_at) says.
struct Plane {
  int nc;
  int64_t base;
  uint8_t word[32], bit[32];
  Plane(void (*at)(int64_t, int, int64_t&, int&), int nc_, int64_t base_) : nc(nc_), base(base_) {
    for (int c = 0; c < nc; ++c) {
      int64_t byte;
      int sh;
      at(c, 0, byte, sh);
      word[c] = static_cast<uint8_t>((byte - base) / 2), bit[c] = static_cast<uint8_t>(8 * ((byte - base) % 2) + sh);
    }
  }
  // Row i's words of tile t: the fields (code[c] >> shift) & mask of its 256 columns.
  void put(const uint8_t* code, int shift, unsigned mask, int i, uint8_t* t) const {
    for (int P = 0; P < kQK / nc; ++P) {
      unsigned w[2] = {0, 0};
      for (int c = 0; c < nc; ++c) w[word[c]] |= ((static_cast<unsigned>(code[nc * P + c]) >> shift) & mask) << bit[c];
      for (int h = 0; h < 2; ++h) {
        t[base + 64 * P + 4 * i + 2 * h] = static_cast<uint8_t>(w[h]);
        t[base + 64 * P + 4 * i + 2 * h + 1] = static_cast<uint8_t>(w[h] >> 8);
      }
    }
  }
};

// One matrix: its rows (blocks of x16_base(f)) copied aside, then written back as tiles from the matrix's start,
// each tile byte once, from the row's codes.
void one(Fmt f, uint8_t* m, int64_t rows, int64_t cols, int64_t row_bytes) {
  static const Plane q6_high(x16_high_at, 16, 2048), q5_fifth(x16_fifth_at, 32, 2048), q3_low(x16_q3_low_at, 16, 0),
      q3_high(x16_q3_high_at, 32, 1024);
  const int64_t nsb = cols / kQK, bb = kquant_block_bytes(f), used = rows * nsb * bb;
  const bool q6 = f == Fmt::Q6_K_X16, q5 = f == Fmt::Q5_K_X16;
  thread_local std::vector<uint8_t> src;
  src.assign(m, m + rows * row_bytes);
  std::memset(m + used, 0, rows * row_bytes - used);
  for (int64_t g = 0; g < rows / 16; ++g)
    for (int64_t s = 0; s < nsb; ++s) {
      uint8_t* t = m + (g * nsb + s) * 16 * bb;
      for (int i = 0; i < 16; ++i) {
        const uint8_t* b = src.data() + (16 * g + i) * row_bytes + s * bb;
        uint8_t code[kQK];
        if (f == Fmt::Q3_K_X16) {  // its 2-bit and high-bit planes, the scale planes, d
          q3k_codes(b, code);
          q3_low.put(code, 0, 3, i, t);
          q3_high.put(code, 2, 1, i, t);
          for (int k = 0; k < 12; ++k) t[1536 + 16 * k + i] = b[96 + k];
          std::memcpy(t + 1728 + 2 * i, b + 108, 2);
          continue;
        }
        q6 ? q6k_codes(b, code) : q5 ? q5k_codes(b, code) : q4k_codes(b, code);
        for (int p = 0; p < 32; ++p)  // x16_nibble_at: column 8p + o in byte 64p + 4i + o % 4, nibble o / 4
          for (int o = 0; o < 4; ++o)
            t[64 * p + 4 * i + o] = static_cast<uint8_t>((code[8 * p + o] & 0xf) | (code[8 * p + 4 + o] & 0xf) << 4);
        if (q6) {
          q6_high.put(code, 4, 3, i, t);
          for (int j = 0; j < 16; ++j) t[3072 + 16 * j + i] = b[192 + j];
          std::memcpy(t + 3328 + 2 * i, b + 208, 2);
        } else {  // Q4_K, Q5_K: (its fifth bits,) the scale planes, d, dmin
          const int64_t sc = q5 ? 2560 : 2048;
          if (q5) q5_fifth.put(code, 4, 1, i, t);
          std::memcpy(t + sc + 192 + 2 * i, b, 2);
          std::memcpy(t + sc + 224 + 2 * i, b + 2, 2);
          for (int k = 0; k < 12; ++k) t[sc + 16 * k + i] = b[4 + k];
        }
      }
    }
}

// The scales of a matrix (rows * ns elements of sb bytes at src, row-major) written 16 rows interleaved to dst.
void x16_scales(uint8_t* dst, const uint8_t* src, int64_t rows, int64_t ns, int sb) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < ns; ++k) std::memcpy(dst + nib_x16_scale_at(ns, r, k) * sb, src + (r * ns + k) * sb, sb);
}

// One 4-bit matrix: codes and scales copied aside, then written back block by block (formats.h: MXFP4_X16).
void one_nib(uint8_t* q, uint8_t* scale, int64_t rows, int64_t cols, int64_t ns, int sb) {
  const int64_t half = cols / 2, nb = cols / 32;
  thread_local std::vector<uint8_t> src, ssrc;
  src.assign(q, q + rows * half);
  ssrc.assign(scale, scale + rows * ns * sb);
  for (int64_t g = 0; g < rows / 16; ++g)
    for (int64_t j = 0; j < nb; ++j) {
      uint8_t* t = q + (g * nb + j) * 256;
      for (int i = 0; i < 16; ++i) {
        const uint8_t* row = src.data() + (16 * g + i) * half + 16 * j;  // the block's 32 codes, 2 a byte
        auto code = [&](int c) { return (row[c / 2] >> (4 * (c & 1))) & 0xf; };
        for (int p = 0; p < 4; ++p)  // columns 8p + b and 8p + 4 + b: byte 64p + 4i + b, low and high nibble
          for (int b = 0; b < 4; ++b)
            t[64 * p + 4 * i + b] = static_cast<uint8_t>(code(8 * p + b) | code(8 * p + 4 + b) << 4);
      }
    }
  x16_scales(scale, ssrc.data(), rows, ns, sb);
}

// One INT8 matrix (formats.h: INT8_SYM_X16): row r's columns 4k .. 4k + 3 go to i8_x16_at(cols, r, 4k) as one word.
void one_int8(uint8_t* q, float* scale, int64_t rows, int64_t cols, int64_t ns) {
  thread_local std::vector<uint8_t> src, ssrc;
  src.assign(q, q + rows * cols);
  ssrc.assign(reinterpret_cast<uint8_t*>(scale), reinterpret_cast<uint8_t*>(scale + rows * ns));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += 4) std::memcpy(q + i8_x16_at(cols, r, c), src.data() + r * cols + c, 4);
  x16_scales(reinterpret_cast<uint8_t*>(scale), ssrc.data(), rows, ns, 4);
}

}  // namespace

// The 4-bit and 8-bit X16 layouts keep each 16 rows' codes and scales where the row-wise ones had them (formats.h:
// i8_x16_at, nib_x16_scale_at, MXFP4_X16): a group of 16 rows repacks as a matrix of its own, so the pool's tasks
// are (matrix, group) -- an LM head is one matrix of ~10k groups.
void nib_to_x16(uint8_t* q, uint8_t* scale, int64_t n, int64_t rows, int64_t cols, int64_t ns, int scale_bytes) {
  const int64_t groups = rows / 16;
  ThreadPool::get().run(n * groups, [&](int64_t i) {
    one_nib(q + i * 16 * (cols / 2), scale + i * 16 * ns * scale_bytes, 16, cols, ns, scale_bytes);
  });
}

void int8_to_x16(uint8_t* q, float* scale, int64_t n, int64_t rows, int64_t cols, int64_t ns) {
  const int64_t groups = rows / 16;
  ThreadPool::get().run(n * groups, [&](int64_t i) { one_int8(q + i * 16 * cols, scale + i * 16 * ns, 16, cols, ns); });
}

void split_blocks(const uint8_t* src, int64_t n, int64_t block_bytes, int64_t head_bytes, bool nibbles, uint8_t* q,
                  uint8_t* head) {
  const int64_t cb = block_bytes - head_bytes, chunk = 1 << 14;
  ThreadPool::get().run((n + chunk - 1) / chunk, [&](int64_t c) {
    for (int64_t i = c * chunk, end = std::min(n, i + chunk); i < end; ++i) {
      const uint8_t* b = src + i * block_bytes;
      std::memcpy(head + i * head_bytes, b, head_bytes);
      const uint8_t* s = b + head_bytes;
      uint8_t* d = q + i * cb;
      if (!nibbles) {
        std::memcpy(d, s, cb);
        continue;
      }
      for (int k = 0; k < 8; ++k) {  // elements 2k, 2k + 1: low nibbles of bytes 2k, 2k + 1; then their high ones
        d[k] = static_cast<uint8_t>((s[2 * k] & 0x0F) | (s[2 * k + 1] << 4));
        d[k + 8] = static_cast<uint8_t>((s[2 * k] >> 4) | (s[2 * k + 1] & 0xF0));
      }
    }
  });
}

void to_x16(Fmt f, uint8_t* q, int64_t n, int64_t rows, int64_t cols, int64_t row_bytes) {
  if (row_bytes == cols / kQK * kquant_block_bytes(f)) {  // unpadded rows: each 16 rows' tiles where their rows were
    ThreadPool::get().run(n * (rows / 16), [&](int64_t i) { one(f, q + i * 16 * row_bytes, 16, cols, row_bytes); });
    return;
  }
  ThreadPool::get().run(n, [&](int64_t e) { one(f, q + e * rows * row_bytes, rows, cols, row_bytes); });
}

}  // namespace ft
