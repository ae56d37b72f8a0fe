#include "cpu/linear.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/bf16act.h"
#include "cpu/dispatch.h"
#include "cpu/threadpool.h"

namespace ft {

namespace {

// One product prepared for the pool: its kernel, x in that kernel's form (its own, or an earlier part's of the
// same form), and its blocks of rows.
struct Part {
  const LinearArgs* a = nullptr;
  RowsFn k = nullptr;
  RowsQ8Fn kq = nullptr;
  RowsBf16Fn kb = nullptr;
  RowsQ16Fn k16 = nullptr;
  Q8Rows xq;  // read by the pool's tasks: not thread_local
  Q16Rows x16;
  std::vector<float> xf;
  const float* X = nullptr;          // fp32 x (given, or widened from bf16)
  const Q8Act* q8v = nullptr;        // int8 x
  const Q16Act* x16v = nullptr;      // 16-bit x
  int64_t rb = 0, nb = 0, row_bytes = 0;

  // Picks the kernel and prepares x, reusing `prev`'s preparations (parts [0, np) of the same x).
  void prepare(const LinearArgs& args, Part* prev, int64_t np) {
    a = &args;
    const int64_t T = args.T, K = args.w.cols, N = args.w.rows;
    k = rows_kernel(args.w.fmt);
    const bool q8 = args.act_int8 && q8_supported(args.w);
    kq = q8 ? rows_q8_kernel(args.w.fmt) : nullptr;
    // bf16 x: the tile kernels from kTileMinTokens tokens, else the bf16 kernel where there is one
    const RowsBf16Fn kt = args.x_bf16 && !q8 && T >= kTileMinTokens ? rows_tile_kernel(args.w) : nullptr;
    kb = kt ? kt : args.x_bf16 && !q8 ? rows_bf16_kernel(args.w, T) : nullptr;
    if (!kb && args.x_bf16 && !q8 && T == 1) kb = rows_bf16_one_kernel(args.w);
    // bf16 x without a bf16 kernel: 16-bit blocks where the format has such a kernel, else widened to fp32
    k16 = args.x_bf16 && !q8 && !kb ? rows_q16_kernel(args.w) : nullptr;
    X = static_cast<const float*>(args.x);
    if (k16) {
      for (int64_t i = 0; i < np && !x16v; ++i) x16v = prev[i].x16v;
      if (!x16v) x16v = &x16.set(static_cast<const uint16_t*>(args.x), T, K, K);
    } else if (args.x_bf16 && !kb) {
      X = nullptr;
      for (int64_t i = 0; i < np && !X; ++i) X = prev[i].xf.empty() ? nullptr : prev[i].xf.data();
      if (!X) {
        xf.resize(T * K);
        bf16_to_f32_n(static_cast<const uint16_t*>(args.x), T * K, xf.data());
        X = xf.data();
      }
    }
    if (q8) {
      for (int64_t i = 0; i < np && !q8v; ++i) q8v = prev[i].q8v;
      if (!q8v) q8v = &xq.set(X, T, K, K);
    }
    // Blocks of ~64 KiB of weights (a multiple of 8 rows): enough tasks to balance the pool, and the rows of a
    // block stay in cache while the kernels' token tiles (kTokBlock tokens) take turns over them. Where a call reads
    // each weight once (up to kTokBlock tokens, one tile; BF16 weights in their bf16 kernel: up to
    // bf16_stream_tokens, one pass) blocks of a quarter of a thread's share of the rows instead:
    // few, long runs of contiguous rows, since every task prepares x for its kernel (the BF16 kernels copy it to a
    // padded buffer, the X16 ones permute it), which 64 KiB blocks did once per 16 BF16 rows: one Zen 5 core, bf16
    // attention and LM head, tok/s, paired in one process: deep MXFP4 FTW one sequence 15.7 -> 16.5, four 38.1 ->
    // 40.0; mid BF16 44.8 -> 47.2 (mid MXFP4_MOE GGUF, whose kernels prepare x once a call, 102.3 / 102.4). From 16
    // tokens (prefill) up to ~512 KiB, at least 4 tasks a thread: there the tokens-in-lanes kernels transpose x, so
    // small blocks would pack it once per few rows. X16 blocks are whole groups of 16 rows.
    row_bytes = std::max<int64_t>(args.w.q_stride, 1);
    const int64_t u = rows_in_16s(args.w.fmt) ? 16 : 8, threads = ThreadPool::get().size();
    rb = std::clamp<int64_t>((64 << 10) / row_bytes / u * u, u, 512);
    const bool one_pass = kb && args.w.fmt == Fmt::BF16 ? T <= bf16_stream_tokens(K) : T <= kTokBlock;
    if (one_pass) rb = std::max<int64_t>(rb, N / (4 * threads) / u * u);
    if (T >= 16)
      rb = std::clamp<int64_t>(std::min<int64_t>((512 << 10) / row_bytes, N / (4 * threads)) / u * u, rb, 512);
    nb = (N + rb - 1) / rb;
  }

  void task(int64_t b) const {
    const int64_t T = a->T, K = a->w.cols, N = a->w.rows;
    const int64_t r0 = b * rb, r1 = std::min(N, r0 + rb);
    // A bf16 result: the block's fp32 sums in a per-thread buffer, rounded into y_bf16 while in cache.
    thread_local std::vector<float> block;
    if (a->y_bf16 && static_cast<int64_t>(block.size()) < T * (r1 - r0)) block.resize(T * (r1 - r0));
    float* Y = a->y_bf16 ? block.data() : a->y + r0;
    const int64_t ldy = a->y_bf16 ? r1 - r0 : N;
    if (kb)
      kb(a->w, r0, r1, static_cast<const uint16_t*>(a->x), T, K, Y, ldy);
    else if (kq)
      kq(a->w, r0, r1, *q8v, Y, ldy);
    else if (k16)
      k16(a->w, r0, r1, *x16v, Y, ldy);
    else
      k(a->w, r0, r1, X, T, K, Y, ldy);
    if (a->bias)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = r0; r < r1; ++r) Y[t * ldy + r - r0] += a->bias[r];
    if (a->y_bf16) {
      const int64_t ldo = a->ldy_bf16 ? a->ldy_bf16 : N;
      for (int64_t t = 0; t < T; ++t) f32_to_bf16_n(Y + t * ldy, r1 - r0, a->y_bf16 + t * ldo + r0, nullptr);
    }
  }
};

}  // namespace

void linear(const LinearArgs& a) { linear_parts(&a, 1); }

void linear_parts(const LinearArgs* parts, int64_t n) {
  for (int64_t i = 1; i < n; ++i)
    if (parts[i].x != parts[0].x || parts[i].x_bf16 != parts[0].x_bf16 || parts[i].T != parts[0].T ||
        parts[i].w.cols != parts[0].w.cols)
      throw std::invalid_argument("linear_parts: part " + std::to_string(i) + " does not share part 0's x");
  for (int64_t i = 0; i < n; ++i)
    if (const char* why = check_mat(parts[i].w))
      throw std::invalid_argument((n > 1 ? "part " + std::to_string(i) + " w: " : std::string("w: ")) + why);
  if (n <= 0 || parts[0].T == 0) return;
  std::unique_ptr<Part[]> p(new Part[n]);
  int64_t nb = 0, work = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (parts[i].w.rows == 0) continue;
    p[i].prepare(parts[i], p.get(), i);
    nb += p[i].nb;
    work += parts[i].w.rows * p[i].row_bytes * parts[i].T;
  }
  // task j: part i's block j - (the blocks of the parts before it)
  auto task = [&](int64_t j) {
    int64_t i = 0;
    while (j >= p[i].nb) j -= p[i++].nb;
    p[i].task(j);
  };
  // Small (weight bytes times tokens): waking the pool would cost more than the work. A prefill's k / v
  // projection ([512, 2048] Q4_K, 128 tokens) is 590 KB of weights but ~1.4 ms of products a core.
  if (work < (1 << 20)) {
    for (int64_t j = 0; j < nb; ++j) task(j);
  } else {
    ThreadPool::get().run(nb, task);
  }
}

}  // namespace ft
