#include "cpu/repack.h"

#include <cstring>
#include <vector>

#include "cpu/formats.h"
#include "cpu/threadpool.h"

namespace ft {

namespace {

// One matrix: its Q4_K rows copied aside, then written back as tiles from the matrix's start.
void one(uint8_t* m, int64_t rows, int64_t cols, int64_t row_bytes) {
  const int64_t nsb = cols / kQK, used = rows * nsb * 144;
  thread_local std::vector<uint8_t> src;
  src.assign(m, m + rows * row_bytes);
  std::memset(m + used, 0, rows * row_bytes - used);
  for (int64_t g = 0; g < rows / 16; ++g)
    for (int64_t s = 0; s < nsb; ++s) {
      uint8_t* t = m + (g * nsb + s) * kX16Tile;
      for (int i = 0; i < 16; ++i) {
        const uint8_t* b = src.data() + (16 * g + i) * row_bytes + s * 144;
        std::memcpy(t + 2240 + 2 * i, b, 2);
        std::memcpy(t + 2272 + 2 * i, b + 2, 2);
        for (int k = 0; k < 12; ++k) t[2048 + 16 * k + i] = b[4 + k];
        const uint8_t* qs = b + 16;
        for (int p = 0; p < 32; ++p)  // columns 8p .. 8p + 7
          for (int c = 0; c < 4; ++c) {
            auto code = [&](int col) {  // Q4_K: column 64j + l in the low (l < 32) or high nibble of byte 32j + l % 32
              const int j = col / 64, l = col % 64;
              return (qs[32 * j + l % 32] >> (4 * (l / 32))) & 0xf;
            };
            t[64 * p + 4 * i + c] = static_cast<uint8_t>(code(8 * p + c) | (code(8 * p + 4 + c) << 4));
          }
      }
    }
}

}  // namespace

void q4k_to_x16(uint8_t* q, int64_t n, int64_t rows, int64_t cols, int64_t row_bytes) {
  ThreadPool::get().run(n, [&](int64_t e) { one(q + e * rows * row_bytes, rows, cols, row_bytes); });
}

}  // namespace ft
