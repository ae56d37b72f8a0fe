// AMX: the tile configuration both tile-kernel files load (x86_amx_x16.cpp, x86_amx_q6k.cpp). Each kernel call
// loads its shapes (palette 1) on the calling thread and releases the tiles when it returns. Included by files
// compiled with AMX-TILE.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace ft {
namespace {

// Tiles 0..n-1 of rows[i] rows of colsb[i] bytes.
inline void tiles_configure(int n, const uint8_t* rows, const uint16_t* colsb) {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } c;
  for (int i = 0; i < n; ++i) c.rows[i] = rows[i], c.colsb[i] = colsb[i];
  _tile_loadconfig(&c);
}

}  // namespace
}  // namespace ft
