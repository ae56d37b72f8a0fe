// The AVX-512 X16 kernels' software prefetch of their weight stream (x86_avx512vnni_x16i16.cpp and the files of
// x86_avx512bf16_x16.h), kX16Ahead bytes ahead of their loads, and the AVX-512 BF16 kernel's of its BF16 rows
// (x86_avx512bf16.h): non-temporal into L1 where x16_prefetch_nta() says so (Zen 5, FT_X16_PREFETCH), else into
// L2. The choice is read once per file at load, as kX16Ahead is; a branch each 64-byte load, always the same way.
#pragma once
#include <immintrin.h>

#include "cpu/dispatch.h"  // x16_prefetch_nta

namespace ft {
namespace {

static const bool kX16Nta = x16_prefetch_nta();

// Prefetches the line at p (the caller adds the distance).
inline void x16_prefetch(const void* p) {
  if (kX16Nta)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_NTA);
  else
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
}

}  // namespace
}  // namespace ft
