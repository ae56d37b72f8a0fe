// Load-time repacks of stored weight layouts into the layouts some kernels read faster. Python-free.
#pragma once
#include <cstdint>

#include "cpu/formats.h"

namespace ft {

// Q4_K -> Q4_K_X16, Q5_K -> Q5_K_X16, Q6_K -> Q6_K_X16 or Q3_K -> Q3_K_X16 (f, cpu/formats.h), in place, for n matrices of [rows, cols] whose rows are
// row_bytes apart (>= cols / 256 * block bytes: rows may be padded, as in mixed banks) and which lie
// rows * row_bytes apart from q. rows % 16 == 0, cols % 256 == 0. The matrices are spread over the kernel pool.
// Twin: ft_kernels.kquants.to_x16.
void to_x16(Fmt f, uint8_t* q, int64_t n, int64_t rows, int64_t cols, int64_t row_bytes);

// MXFP4 -> MXFP4_X16 or INT4_SYM -> INT4_SYM_X16 (cpu/formats.h), in place, for n matrices of [rows, cols] (rows %
// 16 == 0, cols % 32 == 0): codes q (rows * cols / 2 bytes a matrix, back to back) and scales (rows * ns elements of
// scale_bytes a matrix). The matrices are spread over the kernel pool. Twin: ft_kernels.formats.nib_to_x16.
void nib_to_x16(uint8_t* q, uint8_t* scale, int64_t n, int64_t rows, int64_t cols, int64_t ns, int scale_bytes);

// INT8_SYM -> INT8_SYM_X16 or FP8_E4M3 -> FP8_E4M3_X16 (cpu/formats.h: the same bytes' places), in place, for n matrices of [rows, cols] (rows % 16 == 0, cols % 32 == 0):
// codes q (rows * cols bytes a matrix) and fp32 scales (rows * ns a matrix). On the kernel pool. Twin:
// ft_kernels.formats.int8_to_x16.
void int8_to_x16(uint8_t* q, float* scale, int64_t n, int64_t rows, int64_t cols, int64_t ns);

// GGML's 32-element blocks (Q4_0, MXFP4, Q8_0: head_bytes of scale, then the codes) split, for n blocks of
// block_bytes back to back at src: each block's head to head + i * head_bytes, its codes to q + i * code bytes
// (block_bytes - head_bytes), as stored, or where nibbles (16 code bytes: element j < 16 the low nibble of byte j,
// j >= 16 the high nibble of byte j - 16) as the kernels' pairs (element 2k in the low nibble of byte k, 2k + 1 in
// the high one). On the kernel pool, in chunks of blocks. Twin: ft_kernels.reference.split_blocks.
void split_blocks(const uint8_t* src, int64_t n, int64_t block_bytes, int64_t head_bytes, bool nibbles, uint8_t* q,
                  uint8_t* head);

}  // namespace ft
