#include "cpu/linear.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/bf16act.h"
#include "cpu/dispatch.h"
#include "cpu/threadpool.h"

namespace ft {

void linear(const LinearArgs& a) {
  if (const char* why = check_mat(a.w)) throw std::invalid_argument(std::string("w: ") + why);
  const int64_t T = a.T, K = a.w.cols, N = a.w.rows;
  if (T == 0 || N == 0) return;
  const RowsFn k = rows_kernel(a.w.fmt);
  const bool q8 = a.act_int8 && q8_supported(a.w);
  const RowsQ8Fn kq = q8 ? rows_q8_kernel(a.w.fmt) : nullptr;
  Q8Rows xq;  // read by the pool's tasks: not thread_local
  // bf16 x: the tile kernels from kTileMinTokens tokens, else the bf16 kernel where there is one
  const RowsBf16Fn kt = a.x_bf16 && !q8 && T >= kTileMinTokens ? rows_tile_kernel(a.w) : nullptr;
  const RowsBf16Fn kb = kt ? kt : a.x_bf16 && !q8 ? rows_bf16_kernel(a.w) : nullptr;
  // bf16 x without a bf16 kernel: 16-bit blocks where the format has such a kernel, else widened to fp32
  const RowsQ16Fn k16 = a.x_bf16 && !q8 && !kb ? rows_q16_kernel(a.w) : nullptr;
  Q16Rows x16;
  std::vector<float> xf;
  const float* X = static_cast<const float*>(a.x);
  if (k16) {
    x16.set(static_cast<const uint16_t*>(a.x), T, K, K);
  } else if (a.x_bf16 && !kb) {
    xf.resize(T * K);
    bf16_to_f32_n(static_cast<const uint16_t*>(a.x), T * K, xf.data());
    X = xf.data();
  }
  if (q8) xq.set(X, T, K, K);
  // Blocks of ~64 KiB of weights (a multiple of 8 rows): enough tasks to balance the pool, long enough
  // runs of contiguous rows for the prefetchers. From 16 tokens (prefill) up to ~512 KiB, at least 4 tasks a
  // thread: every task packs x for its kernel (the tokens-in-lanes kernels transpose it), so small blocks
  // would pack it once per few rows.
  // X16 blocks are whole groups of 16 rows.
  const int64_t row_bytes = std::max<int64_t>(a.w.q_stride, 1), u = rows_in_16s(a.w.fmt) ? 16 : 8;
  int64_t rb = std::clamp<int64_t>((64 << 10) / row_bytes / u * u, u, 512);
  if (T >= 16)
    rb = std::clamp<int64_t>(std::min<int64_t>((512 << 10) / row_bytes, N / (4 * ThreadPool::get().size())) / u * u,
                             rb, 512);
  const int64_t nb = (N + rb - 1) / rb;
  auto task = [&](int64_t b) {
    const int64_t r0 = b * rb, r1 = std::min(N, r0 + rb);
    // A bf16 result: the block's fp32 sums in a per-thread buffer, rounded into y_bf16 while in cache.
    thread_local std::vector<float> block;
    if (a.y_bf16 && static_cast<int64_t>(block.size()) < T * (r1 - r0)) block.resize(T * (r1 - r0));
    float* Y = a.y_bf16 ? block.data() : a.y + r0;
    const int64_t ldy = a.y_bf16 ? r1 - r0 : N;
    if (kb)
      kb(a.w, r0, r1, static_cast<const uint16_t*>(a.x), T, K, Y, ldy);
    else if (q8)
      kq(a.w, r0, r1, xq.view, Y, ldy);
    else if (k16)
      k16(a.w, r0, r1, x16.view, Y, ldy);
    else
      k(a.w, r0, r1, X, T, K, Y, ldy);
    if (a.bias)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = r0; r < r1; ++r) Y[t * ldy + r - r0] += a.bias[r];
    if (a.y_bf16)
      for (int64_t t = 0; t < T; ++t) f32_to_bf16_n(Y + t * ldy, r1 - r0, a.y_bf16 + t * N + r0, nullptr);
  };
  // Small (weight bytes times tokens): waking the pool would cost more than the work. A prefill's k / v
  // projection ([512, 2048] Q4_K, 128 tokens) is 590 KB of weights but ~1.4 ms of products a core.
  if (N * row_bytes * T < (1 << 20)) {
    for (int64_t b = 0; b < nb; ++b) task(b);
  } else {
    ThreadPool::get().run(nb, task);
  }
}

}  // namespace ft
