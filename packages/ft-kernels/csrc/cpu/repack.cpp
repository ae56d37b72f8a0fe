#include "cpu/repack.h"

#include <cstring>
#include <vector>

#include "cpu/formats.h"
#include "cpu/threadpool.h"

namespace ft {

namespace {

// One matrix: its rows (blocks of x16_base(f)) copied aside, then written back as tiles from the matrix's start.
void one(Fmt f, uint8_t* m, int64_t rows, int64_t cols, int64_t row_bytes) {
  const int64_t nsb = cols / kQK, bb = kquant_block_bytes(f);
  thread_local std::vector<uint8_t> src;
  src.assign(m, m + rows * row_bytes);
  std::memset(m, 0, rows * row_bytes);
  for (int64_t g = 0; g < rows / 16; ++g)
    for (int64_t s = 0; s < nsb; ++s) {
      uint8_t* t = m + (g * nsb + s) * 16 * bb;
      for (int i = 0; i < 16; ++i) {
        const uint8_t* b = src.data() + (16 * g + i) * row_bytes + s * bb;
        for (int c = 0; c < kQK; ++c) {
          const int code = f == Fmt::Q4_K_X16 ? q4k_code(b, c) : q6k_code(b, c);
          int64_t at;
          int sh;
          x16_nibble_at(c, i, at, sh);
          t[at] |= static_cast<uint8_t>((code & 0xf) << sh);
          if (f == Fmt::Q6_K_X16) {
            x16_high_at(c, i, at, sh);
            t[at] |= static_cast<uint8_t>((code >> 4) << sh);
          }
        }
        if (f == Fmt::Q4_K_X16) {
          std::memcpy(t + 2240 + 2 * i, b, 2);
          std::memcpy(t + 2272 + 2 * i, b + 2, 2);
          for (int k = 0; k < 12; ++k) t[2048 + 16 * k + i] = b[4 + k];
        } else {
          for (int j = 0; j < 16; ++j) t[3072 + 16 * j + i] = b[192 + j];
          std::memcpy(t + 3328 + 2 * i, b + 208, 2);
        }
      }
    }
}

}  // namespace

void to_x16(Fmt f, uint8_t* q, int64_t n, int64_t rows, int64_t cols, int64_t row_bytes) {
  ThreadPool::get().run(n, [&](int64_t e) { one(f, q + e * rows * row_bytes, rows, cols, row_bytes); });
}

}  // namespace ft
