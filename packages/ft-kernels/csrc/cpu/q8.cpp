#include "cpu/q8.h"

#include "cpu/dispatch.h"    // quantize_q16_fn, quantize_q8_fn
#include "cpu/threadpool.h"

#include <cstring>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>

namespace ft {

void quantize_q8(const float* x, int64_t cols, int8_t* q, float* d, float* sd) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    d[b] = amax / 127.f;
    int s0 = 0, s1 = 0;
    for (int i = 0; i < 32; ++i) {
      const int v = static_cast<int>(std::nearbyint(xb[i] * inv));  // ties to even (default rounding mode)
      const int c = std::clamp(v, -127, 127);
      q[32 * b + (i % 2) * 16 + i / 2] = static_cast<int8_t>(c);  // even columns first, then odd
      (i < 16 ? s0 : s1) += c;
    }
    sd[2 * b] = d[b] * static_cast<float>(s0);
    sd[2 * b + 1] = d[b] * static_cast<float>(s1);
  }
}

bool q8_supported(const WeightMat& w) {
  if (w.cols % 32) return false;
  switch (w.fmt) {
    case Fmt::MXFP4:
    case Fmt::MXFP4_X16:
    case Fmt::NVFP4: return true;
    case Fmt::INT4_SYM:
    case Fmt::INT4_SYM_X16:
    case Fmt::INT4_ASYM: return w.group % 32 == 0;
    case Fmt::Q4_K:
    case Fmt::Q5_K:
    case Fmt::Q6_K:
    case Fmt::Q3_K:
    case Fmt::Q2_K:
    case Fmt::Q4_K_X16:
    case Fmt::Q5_K_X16:
    case Fmt::Q6_K_X16:
    case Fmt::Q3_K_X16: return w.cols % kQK == 0;
    default: return false;
  }
}

template <class E>
QAct<E> QRowsBuf<E>::reserve(int64_t ntok, int64_t cols) {
  const int64_t nb = cols / 32;
  if (ntok * cols > cap_q) {
    std::free(q);
    q = static_cast<E*>(std::malloc(sizeof(E) * std::max<int64_t>(ntok * cols, 1)));
    cap_q = q ? ntok * cols : 0;
  }
  if (ntok * nb * 3 > cap_f) {
    std::free(f);
    f = static_cast<float*>(std::malloc(sizeof(float) * std::max<int64_t>(ntok * nb * 3, 1)));
    cap_f = f ? ntok * nb * 3 : 0;
  }
  if (!q || !f) throw std::bad_alloc();
  return QAct<E>{q, f, f + ntok * nb, ntok, cols, nb};
}

template <class E>
QRowsBuf<E>::~QRowsBuf() {
  std::free(q);
  std::free(f);
}

template <class E>
const QAct<E>& QRowsBuf<E>::gather(const QAct<E>& src, const int64_t* rows, int64_t n) {
  const int64_t cols = src.ldq, nb = src.ldb;
  view = reserve(n, cols);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows[i];
    std::memcpy(q + i * cols, src.q + r * src.ldq, sizeof(E) * cols);  // reserve's layout: codes, d, sd
    std::memcpy(f + i * nb, src.d + r * nb, sizeof(float) * nb);
    std::memcpy(f + (n + 2 * i) * nb, src.sd + r * 2 * nb, sizeof(float) * 2 * nb);
  }
  return view;
}

// fn(t) for t in [0, ntok): on the pool in runs of ~32K elements from 2^16 (the quantisers' rows are independent).
template <class Fn>
static void each_row(int64_t ntok, int64_t cols, const Fn& fn) {
  if (ntok * cols < (1 << 16)) {
    for (int64_t t = 0; t < ntok; ++t) fn(t);
    return;
  }
  const int64_t per = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(cols, 1));
  ThreadPool::get().run((ntok + per - 1) / per, [&](int64_t b) {
    for (int64_t t = b * per; t < std::min(ntok, b * per + per); ++t) fn(t);
  });
}

template struct QRowsBuf<int8_t>;
template struct QRowsBuf<int16_t>;

const Q8Act& Q8Rows::set(const float* X, int64_t ntok, int64_t ldx, int64_t cols) {
  view = reserve(ntok, cols);
  const QuantizeQ8Fn quantize = quantize_q8_fn();
  each_row(ntok, cols, [&](int64_t t) {
    quantize(X + t * ldx, cols, q + t * cols, f + t * view.ldb, f + (ntok + 2 * t) * view.ldb);
  });
  return view;
}

const Q16Act& Q16Rows::set(const uint16_t* X, int64_t ntok, int64_t ldx, int64_t cols) {
  view = reserve(ntok, cols);
  const QuantizeQ16Fn quantize = quantize_q16_fn();
  each_row(ntok, cols, [&](int64_t t) {
    quantize(X + t * ldx, cols, q + t * cols, f + t * view.ldb, f + (ntok + 2 * t) * view.ldb);
  });
  return view;
}

}  // namespace ft
