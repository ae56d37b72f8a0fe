#include "cpu/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/threadpool.h"

namespace ft {

namespace {

struct Group {
  int64_t e, start, k;  // expert, first position in the expert-sorted route order, routes
};

// A calling thread's work arrays, kept between calls: a prefill call needs ~90 MB of them (512 tokens,
// Qwen3-30B-A3B shape), and fresh allocations are fresh pages, which the OS faults in and zeroes on every
// call. Uninitialised (every element is written before it is read). Released after a call that grew them
// past kKeepBytes, so one long prompt does not pin its arrays.
class Scratch {
 public:
  static constexpr int64_t kKeepBytes = int64_t(256) << 20;
  template <class T>
  T* get(int i, int64_t n) {
    const int64_t bytes = std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(T));
    if (bytes > size_[i]) {
      std::free(p_[i]);
      p_[i] = std::malloc(bytes);
      size_[i] = p_[i] ? bytes : 0;
      if (!p_[i]) throw std::bad_alloc();
    }
    return static_cast<T*>(p_[i]);
  }
  void trim() {
    int64_t total = 0;
    for (int64_t b : size_) total += b;
    if (total <= kKeepBytes) return;
    for (int i = 0; i < kSlots; ++i) std::free(p_[i]), p_[i] = nullptr, size_[i] = 0;
  }
  ~Scratch() {
    for (void* p : p_) std::free(p);
  }

 private:
  static constexpr int kSlots = 6;
  void* p_[kSlots] = {};
  int64_t size_[kSlots] = {};
};

// Rows per task. Prefill: one task's weight rows within ~512 KiB (L2) so token tiles reuse them, and no fewer
// (up to 256): each call packs its x for the kernel (the tokens-in-lanes kernels transpose it), so short blocks
// pay that once per few rows. Decode (every expert's routes fit one register tile): long runs of contiguous
// rows (~256 KiB) for the prefetchers.
// Multiples of 8 rows; of 32 for the X16 formats (whole groups of 16, also for W13's halved blocks).
int64_t row_unit(const WeightMat& m) { return rows_in_16s(m.fmt) ? 32 : 8; }
int64_t row_block(const WeightMat& m, bool decode) {
  const int64_t row_bytes = std::max<int64_t>(m.q_stride, 1), u = row_unit(m);
  return decode ? std::clamp<int64_t>((256 << 10) / row_bytes / u * u, u, 1024)
                : std::clamp<int64_t>((512 << 10) / row_bytes / u * u, u, 256);
}

void check(const MoeArgs& a) {
  auto bad = [](const std::string& s) { throw std::invalid_argument(s); };
  for (const auto* b : {&a.w13, &a.w2})
    if (const char* why = check_mat(b->mat)) bad(std::string(b == &a.w13 ? "w13: " : "w2: ") + why);
  if (a.w13.mat.cols != a.H) bad("w13 has " + std::to_string(a.w13.mat.cols) + " columns, x has H=" + std::to_string(a.H));
  if (a.w13.mat.rows % 2) bad("w13 must have 2I rows (gate then up)");
  if (a.w2.mat.rows != a.H || a.w2.mat.cols != a.w13.mat.rows / 2)
    bad("w2 must be [H, I] = [" + std::to_string(a.H) + ", " + std::to_string(a.w13.mat.rows / 2) + "]");
  if (a.w2.n_experts != a.w13.n_experts) bad("w13 and w2 hold different numbers of experts");
  for (int64_t r = 0; r < a.R; ++r) {
    if (a.tok[r] < 0 || a.tok[r] >= a.T)
      bad("tok[" + std::to_string(r) + "]=" + std::to_string(a.tok[r]) + " is outside [0, T=" + std::to_string(a.T) + ")");
    if (a.eid[r] < 0 || a.eid[r] >= a.w13.n_experts)
      bad("eid[" + std::to_string(r) + "]=" + std::to_string(a.eid[r]) + " is outside [0, N=" +
          std::to_string(a.w13.n_experts) + ") experts in the bank");
  }
}

}  // namespace

void moe_experts(const MoeArgs& a) {
  check(a);
  const int64_t H = a.H, I = a.w13.mat.rows / 2, R = a.R;
  std::memset(a.y, 0, sizeof(float) * a.T * H);
  if (R == 0) return;
  RowsFn k13 = rows_kernel(a.w13.mat.fmt), k2 = rows_kernel(a.w2.mat.fmt);
  const bool q8 = a.act_int8 && q8_supported(a.w13.mat) && q8_supported(a.w2.mat);
  RowsQ8Fn k13q = q8 ? rows_q8_kernel(a.w13.mat.fmt) : nullptr, k2q = q8 ? rows_q8_kernel(a.w2.mat.fmt) : nullptr;
  // Bf16 activations (cpu/bf16act.h): x as given and h rounded to bf16; their kernels where the ISA has them.
  const bool xb = a.x_bf16;
  Q8Rows xq, hq;  // read by the pool's tasks: not thread_local
  Q16Rows xw, hw;
  ThreadPool& pool = ThreadPool::get();

  // Routes sorted by expert (stable: duplicates keep their order); x gathered in that order.
  std::vector<int64_t> order(R);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return a.eid[p] < a.eid[q]; });
  std::vector<Group> groups;
  for (int64_t s = 0; s < R;) {
    int64_t e = a.eid[order[s]], k = 0;
    while (s + k < R && a.eid[order[s + k]] == e) ++k;
    groups.push_back({e, s, k});
    s += k;
  }
  int64_t kmax = 0;
  for (const Group& g : groups) kmax = std::max(kmax, g.k);
  const bool decode = kmax <= 4;  // every expert's routes fit one token tile of the row kernels
  // Decode on one thread: a task is a whole expert (its gate and up rows, then its W2 rows: each one contiguous
  // stream), not ~256 KiB blocks, which there is no pool to balance. One Zen 5 core: top-8 of 128 Qwen3-30B-A3B-shaped
  // MXFP4_X16 experts at one token 32.1 -> 33.8 GB/s, of 16 at 4 tokens 27.1 -> 28.9, BF16 36.3 -> 37.7; mid MXFP4_MOE
  // GGUF decode 102.0 -> 104.8 tok/s, deep MXFP4 FTW four sequences 40.5 -> 41.4 (paired in one process). On two
  // threads whole experts lost (one token: 48.4 -> 46.0 GB/s), so blocks stay there.
  const bool whole = decode && pool.size() == 1;
  RowsBf16Fn k13b = xb && !q8 ? rows_bf16_kernel(a.w13.mat) : nullptr;
  RowsBf16Fn k2b = xb && !q8 ? rows_bf16_kernel(a.w2.mat) : nullptr;
  if (xb && !q8 && kmax == 1) {  // one route an expert: the one-token kernels where those above have none
    if (!k13b) k13b = rows_bf16_one_kernel(a.w13.mat);
    if (!k2b) k2b = rows_bf16_one_kernel(a.w2.mat);
  }
  // a bank without a bf16 kernel: 16-bit blocks (cpu/q8.h: Q16Act) of its input where its format has such kernels, so
  // x and h may take different paths (Zen 5's Q4_K_M: W13 in Q4_K_X16's 16-bit kernel, W2 in Q6_K_X16's bf16 one)
  RowsQ16Fn k13w = xb && !q8 && !k13b ? rows_q16_kernel(a.w13.mat) : nullptr;
  RowsQ16Fn k2w = xb && !q8 && !k2b ? rows_q16_kernel(a.w2.mat) : nullptr;
  // Prefill: the tile kernels (AMX) for each bank that has one; a bank without keeps its kernel above (W13 on tiles,
  // W2 in 16-bit blocks: Q4_K_M's Q6_K W2).
  bool tiles13 = false;
  if (xb && !q8 && !decode) {
    if (const RowsBf16Fn t = rows_tile_kernel(a.w13.mat)) k13b = t, k13w = nullptr, tiles13 = true;
    if (const RowsBf16Fn t = rows_tile_kernel(a.w2.mat)) k2b = t, k2w = nullptr;
  }
  const bool x16 = k13w != nullptr, h16 = k2w != nullptr;  // x / h as 16-bit blocks
  // Calls that read little (tiny models, a few experts) run on the calling thread: waking the pool
  // would cost more than the work.
  const int64_t bytes = static_cast<int64_t>(groups.size()) *
                        (a.w13.q_expert_bytes + a.w13.scale_expert_bytes + a.w2.q_expert_bytes + a.w2.scale_expert_bytes);
  auto run = [&](int64_t n, const std::function<void(int64_t)>& fn) {
    if (bytes < (1 << 20)) {
      for (int64_t i = 0; i < n; ++i) fn(i);
    } else {
      pool.run(n, fn);
    }
  };
  thread_local Scratch scratch;
  // x of the routes in sorted order: as bf16 (bf16 kernels), fp32 (fp32 kernels; with int8 x, bf16 tokens widened
  // for the quantiser), or int8 / 16-bit codes: each token quantised once (on the pool), then gathered per route
  float* xs = scratch.get<float>(0, q8 ? (xb ? a.T * H : 0) : k13b || x16 ? 0 : R * H);
  float* gu = scratch.get<float>(1, R * 2 * I);
  float* h = scratch.get<float>(2, R * I);
  float* out = scratch.get<float>(3, R * H);
  uint16_t* xsb = scratch.get<uint16_t>(4, k13b ? R * H : 0);
  uint16_t* hb = scratch.get<uint16_t>(5, xb ? R * I : 0);
  std::vector<int64_t> rtok(R);
  for (int64_t j = 0; j < R; ++j) rtok[j] = a.tok[order[j]];
  if (q8 || x16) {
    Q8Rows xt8;
    Q16Rows xt16;
    if (x16) {
      xw.gather(xt16.set(static_cast<const uint16_t*>(a.x), a.T, H, H), rtok.data(), R);
    } else {
      if (xb) bf16_to_f32_n(static_cast<const uint16_t*>(a.x), a.T * H, xs);
      xq.gather(xt8.set(xb ? xs : static_cast<const float*>(a.x), a.T, H, H), rtok.data(), R);
    }
  } else {
    for (int64_t j = 0; j < R; ++j) {
      const int64_t t = rtok[j];
      if (k13b) {
        std::memcpy(&xsb[j * H], static_cast<const uint16_t*>(a.x) + t * H, sizeof(uint16_t) * H);
      } else if (xb) {
        bf16_to_f32_n(static_cast<const uint16_t*>(a.x) + t * H, H, &xs[j * H]);
      } else {
        std::memcpy(&xs[j * H], static_cast<const float*>(a.x) + t * H, sizeof(float) * H);
      }
    }
  }

  // Phase 1, tasks = (group, block of I): the block's gate rows and up rows of W13, then the activation
  // (+ w13 bias) for those columns of h. No two tasks write the same element of gu or h.
  {
    // On the tiles, blocks of up to 384 gate and 384 up rows (each call prepares x for its tokens; a tile pass is
    // 32 tokens, and the AMX CPUs' 2 MiB L2 holds the rows between passes): one Sapphire-Rapids-class core pair,
    // 128 tokens, Qwen3-30B-A3B expert shapes in Q4_K_X16, 16 / 128 experts: 227 -> 237 / 118 -> 128 GMAC/s
    const int64_t rb = tiles13 ? std::min<int64_t>(I, 384) : whole ? I : row_block(a.w13.mat, decode) / 2;
    const int64_t nb = (I + rb - 1) / rb;  // gate + up rows
    run(static_cast<int64_t>(groups.size()) * nb, [&](int64_t task) {
      const Group& g = groups[task / nb];
      const int64_t i0 = (task % nb) * rb, i1 = std::min(I, i0 + rb);
      const WeightMat m = a.w13.expert(g.e);
      float* gug = &gu[g.start * 2 * I];
      if (k13b) {
        const uint16_t* xg = &xsb[g.start * H];
        k13b(m, i0, i1, xg, g.k, H, gug + i0, 2 * I);
        k13b(m, I + i0, I + i1, xg, g.k, H, gug + I + i0, 2 * I);
      } else if (q8) {
        const Q8Act xg8 = xq.view.rows(g.start, g.k);
        k13q(m, i0, i1, xg8, gug + i0, 2 * I);
        k13q(m, I + i0, I + i1, xg8, gug + I + i0, 2 * I);
      } else if (x16) {
        const Q16Act xg16 = xw.view.rows(g.start, g.k);
        k13w(m, i0, i1, xg16, gug + i0, 2 * I);
        k13w(m, I + i0, I + i1, xg16, gug + I + i0, 2 * I);
      } else {
        const float* xg = &xs[g.start * H];
        k13(m, i0, i1, xg, g.k, H, gug + i0, 2 * I);              // gate rows
        k13(m, I + i0, I + i1, xg, g.k, H, gug + I + i0, 2 * I);  // up rows
      }
      const float* b = a.w13.bias ? a.w13.bias + g.e * 2 * I : nullptr;
      for (int64_t j = 0; j < g.k; ++j) {
        const float* gj = gug + j * 2 * I;
        float* hj = &h[(g.start + j) * I];
        for (int64_t i = i0; i < i1; ++i) {
          float gv = gj[i] + (b ? b[i] : 0.f), uv = gj[I + i] + (b ? b[I + i] : 0.f);
          if (a.act == Act::SWIGLU) {
            hj[i] = gv / (1.f + std::exp(-gv)) * uv;
          } else {
            gv = std::min(gv, a.limit);
            uv = std::clamp(uv, -a.limit, a.limit);
            hj[i] = (uv + 1.f) * (gv / (1.f + std::exp(-a.alpha * gv)));
          }
        }
        if (xb) f32_to_bf16_n(hj + i0, i1 - i0, &hb[(g.start + j) * I + i0], hj + i0);
      }
    });
  }

  if (q8) hq.set(h, R, I, I);
  if (h16) hw.set(hb, R, I, I);

  // Phase 2. Decode: tasks = (group, block of H), each streaming one expert's contiguous W2 rows into that
  // group's rows of out; then the gate-weighted sum into y on the calling thread (R x H adds).
  // Prefill: tasks = (block of H) over every group: W2 rows of the block, then the gate-weighted sum
  // (+ w2 bias) into those columns of y. A task owns its columns of y, so no two write the same element.
  auto w2_rows = [&](const Group& g, int64_t c0, int64_t c1) {
    float* og = &out[g.start * H];
    if (k2b)
      k2b(a.w2.expert(g.e), c0, c1, &hb[g.start * I], g.k, I, og + c0, H);
    else if (q8)
      k2q(a.w2.expert(g.e), c0, c1, hq.view.rows(g.start, g.k), og + c0, H);
    else if (h16)
      k2w(a.w2.expert(g.e), c0, c1, hw.view.rows(g.start, g.k), og + c0, H);
    else
      k2(a.w2.expert(g.e), c0, c1, &h[g.start * I], g.k, I, og + c0, H);
  };
  auto add_routes = [&](const Group& g, int64_t c0, int64_t c1) {
    const float* b = a.w2.bias ? a.w2.bias + g.e * H : nullptr;
    for (int64_t j = 0; j < g.k; ++j) {
      const int64_t r = order[g.start + j];
      const float gw = a.gate[r];
      float* yt = a.y + int64_t(a.tok[r]) * H;
      const float* o = &out[(g.start + j) * H];
      for (int64_t c = c0; c < c1; ++c) yt[c] += gw * (o[c] + (b ? b[c] : 0.f));
    }
  };
  // Prefill splits only H among the tasks: at least 4 a thread.
  const int64_t u2 = row_unit(a.w2.mat);
  const int64_t rb = decode ? (whole ? H : row_block(a.w2.mat, true))
                            : std::min(row_block(a.w2.mat, false), std::max<int64_t>(u2, H / (4 * pool.size()) / u2 * u2));
  const int64_t nb = (H + rb - 1) / rb;
  if (decode) {
    run(static_cast<int64_t>(groups.size()) * nb, [&](int64_t task) {
      const int64_t c0 = (task % nb) * rb;
      w2_rows(groups[task / nb], c0, std::min(H, c0 + rb));
    });
    for (const Group& g : groups) add_routes(g, 0, H);
  } else {
    run(nb, [&](int64_t task) {
      const int64_t c0 = task * rb, c1 = std::min(H, c0 + rb);
      for (const Group& g : groups) {
        w2_rows(g, c0, c1);
        add_routes(g, c0, c1);
      }
    });
  }
  scratch.trim();
}

}  // namespace ft
