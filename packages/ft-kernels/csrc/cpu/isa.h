// Row kernels per instruction set. Python-free. One implementation file per ISA under arch/,
// the scalar fallback by name (DESIGN §8.7).
#pragma once
#include <cstdint>

namespace ft {

// Y[t, r] = sum_c W[r, c] * X[t, c]   for r < rows, t < ntok
//   W: bf16 bit patterns [rows, cols] (row stride ldw elements)
//   X: fp32 [ntok, cols] (row stride ldx), Y: fp32 [ntok, rows] (row stride ldy)
// Accumulation is fp32; bf16 -> fp32 widening is exact.
using GemvBf16Fn = void (*)(const uint16_t* W, int64_t rows, int64_t cols, int64_t ldw,
                            const float* X, int64_t ntok, int64_t ldx, float* Y, int64_t ldy);

void gemv_bf16_scalar(const uint16_t* W, int64_t rows, int64_t cols, int64_t ldw,
                      const float* X, int64_t ntok, int64_t ldx, float* Y, int64_t ldy);
#ifdef FT_HAVE_X86
void gemv_bf16_avx2(const uint16_t* W, int64_t rows, int64_t cols, int64_t ldw,
                    const float* X, int64_t ntok, int64_t ldx, float* Y, int64_t ldy);
void gemv_bf16_avx512(const uint16_t* W, int64_t rows, int64_t cols, int64_t ldw,
                      const float* X, int64_t ntok, int64_t ldx, float* Y, int64_t ldy);
#endif

// The ISA chosen at run time: FT_CPU_ISA=scalar|avx2|avx512 forces one (unknown or unsupported
// names raise), otherwise the best the CPU supports.
const char* active_isa();
GemvBf16Fn gemv_bf16();

}  // namespace ft
